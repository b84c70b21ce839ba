"""fs/* served to a real agent: inside works; `..`, outside absolute paths and symlinks that
point outside are refused, and nothing outside is read or written."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp import RequestError

from protocol.agent.fs import Confinement
from tests.support.agent_harness import AgentHarness


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


@pytest.mark.timeout(60)
def test_a_fifo_is_refused_at_once_and_never_blocks_the_protocol_loop(
    harness: AgentHarness,
) -> None:
    import os

    fifo = harness.workdir / "pipe"
    os.mkfifo(fifo)
    reply = _turn(harness, f"#read={fifo}")  # returns: nobody ever writes to the FIFO
    assert "read error: -32602" in reply
    with pytest.raises(RequestError, match="Invalid params") as refused:
        Confinement(str(harness.workdir)).read_text(str(fifo))
    assert "not a regular file" in str(refused.value.data)
    # A second agent on the same loop is served meanwhile and after.
    other = harness.connect()
    harness.run(other.start())
    harness.run(other.new_session())
    (harness.workdir / "ok.txt").write_text("fine")
    harness.run(other.prompt([{"type": "text", "text": f"#read={harness.workdir / 'ok.txt'}"}]))
    assert "read: fine" in harness.message_text()


@pytest.mark.timeout(60)
def test_a_huge_file_is_refused_whole_and_read_by_range_within_the_limit(
    harness: AgentHarness,
) -> None:
    import resource

    big = harness.workdir / "big.log"
    with big.open("wb") as fh:
        fh.write(b"first line\nsecond line\n")
        fh.truncate(1024**3)  # a sparse GiB: nothing on disk, 1 GiB to read
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reply = _turn(harness, f"#read={big}")
    assert "read error: -32602" in reply
    with pytest.raises(RequestError) as refused:
        Confinement(str(harness.workdir)).read_text(str(big))
    assert "over the read limit" in str(refused.value.data)
    reply = _turn(harness, f"#readlines={big}:2:1")
    assert "read: second line\n" in reply
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown_kib < 200 * 1024  # nothing near the file's size was held in memory


def test_confinement_reads_at_most_the_limit_and_writes_at_most_the_limit(tmp_path: Path) -> None:
    confinement = Confinement(str(tmp_path))
    (tmp_path / "f.txt").write_text("a\n" * 1000)
    with pytest.raises(RequestError, match="Invalid params"):
        confinement.read_text(str(tmp_path / "f.txt"), max_bytes=1024)
    assert confinement.read_text(str(tmp_path / "f.txt"), 10, 3, max_bytes=1024) == "a\n" * 3
    with pytest.raises(RequestError):
        confinement.read_text(str(tmp_path / "f.txt"), 1, None, max_bytes=1024)
    with pytest.raises(RequestError):
        confinement.write_text(str(tmp_path / "g.txt"), "x" * 2048, max_bytes=1024)
    assert not (tmp_path / "g.txt").exists()
