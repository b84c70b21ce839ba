from __future__ import annotations

import asyncio
import time
from pathlib import Path

from control_plane import AsyncControlPlane, CommandState
from tests.support.cp_harness import FAST, example_agent


def test_async_control_plane_never_blocks_the_callers_loop(tmp_path: Path) -> None:
    async def main() -> tuple[float, str, list[str]]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        tick = asyncio.ensure_future(ticker())
        settings = FAST.__class__(**{**FAST.__dict__, "log_dir": str(tmp_path / "logs")})
        async with await AsyncControlPlane.open(tmp_path / "cp.db", settings=settings) as cp:
            spawned = await cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=20 #delay=20 hi")
            assert spawned.command is not None
            outcome = await cp.wait(spawned.command.id, 60)
            followed = []
            closer = asyncio.ensure_future(cp.close_session(spawned.session.id))
            async for event in cp.follow(spawned.session.id):
                followed.append(event.kind)
            await closer
        stop.set()
        await tick
        assert outcome.state is CommandState.COMPLETED
        return max(gaps), outcome.text, followed

    worst_gap, text, kinds = asyncio.run(asyncio.wait_for(main(), 120))
    assert worst_gap < 0.5  # the loop kept ticking through agent start, turn and waits
    assert text.startswith("c0 c1")
    assert kinds[0] == "session_created" and kinds[-1] == "closed"
