"""fs/* served to a real agent: inside works; `..`, outside absolute paths and symlinks that
point outside are refused, and nothing outside is read or written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from acp import RequestError

from protocol.fs import Confinement
from tests.agent_harness import AgentHarness


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AgentHarness]:
    h = AgentHarness(tmp_path)
    try:
        yield h
    finally:
        h.close()


def _turn(h: AgentHarness, prompt: str) -> str:
    conn = h.connections[0] if h.connections else h.connect()
    if conn.acp_session_id is None:
        h.run(conn.start())
        h.run(conn.new_session())
    before = len(h.message_text())
    h.run(conn.prompt([{"type": "text", "text": prompt}]))
    return h.message_text()[before:]


def test_read_and_write_inside_the_cwd_work(harness: AgentHarness) -> None:
    (harness.workdir / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    reply = _turn(harness, f"#read={harness.workdir / 'notes.txt'}")
    assert "read: alpha\nbeta\ngamma" in reply
    reply = _turn(harness, f"#readlines={harness.workdir / 'notes.txt'}:2:1")
    assert "read: beta\n" in reply and "gamma" not in reply
    reply = _turn(harness, f"#write={harness.workdir / 'out.txt'}:hello")
    assert "wrote:" in reply
    assert (harness.workdir / "out.txt").read_text() == "hello"


def test_escapes_are_refused_and_nothing_outside_is_touched(harness: AgentHarness) -> None:
    outside = harness.tmp / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("top secret")
    (harness.workdir / "link").symlink_to(outside)
    attempts = [
        f"#read={harness.workdir}/../outside/secret.txt",
        f"#read={secret}",
        f"#read={harness.workdir}/link/secret.txt",
        f"#write={harness.workdir}/../outside/secret.txt:pwned",
        f"#write={outside}/new.txt:pwned",
        f"#write={harness.workdir}/link/new.txt:pwned",
    ]
    for attempt in attempts:
        reply = _turn(harness, attempt)
        assert "error: -32602" in reply, (attempt, reply)
        assert "top secret" not in reply
    assert secret.read_text() == "top secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_additional_directories_are_allowed(tmp_path: Path) -> None:
    cwd, extra = tmp_path / "cwd", tmp_path / "extra"
    cwd.mkdir()
    extra.mkdir()
    (extra / "f.txt").write_text("x")
    confinement = Confinement(str(cwd), [str(extra)])
    assert confinement.read_text(str(extra / "f.txt")) == "x"
    with pytest.raises(RequestError) as info:
        confinement.read_text(str(tmp_path / "elsewhere.txt"))
    assert info.value.code == -32602


def test_missing_file_inside_is_resource_not_found(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as info:
        Confinement(str(tmp_path)).read_text(str(tmp_path / "nope.txt"))
    assert info.value.code == -32002
