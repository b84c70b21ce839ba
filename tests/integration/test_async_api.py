from __future__ import annotations

import asyncio
import time
from pathlib import Path

from control_plane import AsyncControlPlane, CommandState
from tests.support.cp_harness import FAST, example_agent


def test_async_control_plane_never_blocks_the_callers_loop(tmp_path: Path, db: str) -> None:
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
        async with await AsyncControlPlane.open(db, settings=settings) as cp:
            # A 2 s turn: a call that blocked the loop through it would leave a gap of 2 s or
            # more, well apart from the scheduling noise of a loaded 2-core machine (0.65 s
            # seen under CI with four workers).
            spawned = await cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=40 #delay=50 hi")
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
    assert worst_gap < 1.0  # the loop kept ticking through agent start, turn and waits
    assert text.startswith("c0 c1")
    assert kinds[0] == "session_created" and kinds[-1] == "closed"
