"""PostgreSQL: a node's LISTEN skips what its own writer's commits sent (store/listen.py),
and still hands over what any other connection sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane import CommandState
from store import CommandKind, Store
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp

# The PostgreSQL variants stay in the default run: PostgreSQL's own
# notifications.
pytestmark = pytest.mark.backend_specific


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_own_commits_notifications_are_skipped_and_others_handed_over(
    tmp_path: Path, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        listener = cp._supervisor._listener
        assert listener is not None
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=2 one")
        assert spawned.command is not None and cp.wait(spawned.command.id, 60).ok
        sid = spawned.session.id
        for i in range(3):
            assert cp.wait(cp.prompt(sid, f"#chunks=2 p{i}").id, 60).ok
        # Every enqueue and every commit that appended sent one: none came back to work.
        eventually(lambda: listener.skipped >= 4, what="own notifications heard and skipped")
        assert listener.received == listener.skipped
        assert cp._store.own_backend_pid is not None
        # Another connection's write (another process, another node) is handed over.
        other = Store.open(db)
        try:
            content = {"content": [{"type": "text", "text": "#chunks=2 from elsewhere"}]}
            command = other.enqueue(sid, CommandKind.PROMPT, content).command
        finally:
            other.close()
        eventually(lambda: listener.received > listener.skipped, what="the other's handed over")
        assert cp.wait(command.id, 30).state is CommandState.COMPLETED
