from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from acp import RequestError

from protocol.agent.fs import Confinement
from protocol.agent.terminals import TerminalManager


def _manager(tmp_path: Path, enabled: bool) -> TerminalManager:
    return TerminalManager(Confinement(str(tmp_path)), {"PATH": os.environ["PATH"]}, enabled)


def test_terminals_are_off_by_default_with_method_not_found(tmp_path: Path) -> None:
    manager = TerminalManager(Confinement(str(tmp_path)), {})
    with pytest.raises(RequestError) as info:
        asyncio.run(manager.create("echo", ["hi"], None, None, None))
    assert info.value.code == -32601


def test_enabled_terminal_runs_in_the_cwd_and_reports_exit(tmp_path: Path) -> None:
    async def main() -> tuple[str, int | None]:
        manager = _manager(tmp_path, True)
        created = await manager.create("sh", ["-c", "pwd; exit 4"], None, None, None)
        exit_status = await manager.wait_for_exit(created.terminal_id)
        output = await manager.output(created.terminal_id)
        await manager.release(created.terminal_id)
        return output.output, exit_status.exit_code

    output, code = asyncio.run(main())
    assert output.strip() == os.path.realpath(tmp_path)
    assert code == 4


def test_output_byte_limit_keeps_the_tail_and_reports_truncation(tmp_path: Path) -> None:
    async def main() -> tuple[str, bool]:
        manager = _manager(tmp_path, True)
        created = await manager.create(
            "sh", ["-c", "for i in $(seq 1 2000); do echo line$i; done"], None, None, 100
        )
        await manager.wait_for_exit(created.terminal_id)
        output = await manager.output(created.terminal_id)
        return output.output, output.truncated

    text, truncated = asyncio.run(main())
    assert truncated and len(text.encode()) <= 100
    assert text.endswith("line2000\n")


def test_kill_ends_a_running_terminal_and_release_forgets_it(tmp_path: Path) -> None:
    async def main() -> tuple[str | None, int]:
        manager = _manager(tmp_path, True)
        created = await manager.create("sleep", ["30"], None, None, None)
        await manager.kill(created.terminal_id)
        status = await asyncio.wait_for(manager.wait_for_exit(created.terminal_id), 5)
        await manager.release(created.terminal_id)
        try:
            await manager.output(created.terminal_id)
        except RequestError as exc:
            return status.signal, exc.code
        return status.signal, 0

    signal_name, code = asyncio.run(main())
    assert signal_name == "SIGKILL"
    assert code == -32602


def test_terminal_cwd_outside_the_session_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cwd").mkdir()
    manager = TerminalManager(Confinement(str(tmp_path / "cwd")), {}, True)
    with pytest.raises(RequestError):
        asyncio.run(manager.create("true", [], None, "/", None))
