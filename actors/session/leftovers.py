"""Killing what an earlier owner of a session left running, before the session's agent is
started again: two copies of one agent (or of a shell command it ran) must never work on the
same files.

A control plane that dies takes its agents' trees with it (``protocol.agent.reaper``). What can
still be left: a tree whose reaper was itself SIGKILLed (the OOM killer, ``kill -9`` of the
whole process group), or descendants that left the agent's group. The session row records
the tree (``agent_process``); on the same host and boot it is killed here.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from protocol.agent.proc_tree import boot_id, kill_leftover_tree

log = logging.getLogger(__name__)


def kill_leftovers(session_id: str, tree: dict[str, Any] | None) -> int:
    """Kill the recorded tree if it belongs to this host and boot; how many processes were
    signalled (0 when nothing was left)."""
    if not tree or tree.get("host") != socket.gethostname() or tree.get("bootId") != boot_id():
        return 0
    try:
        reaper, start = int(tree["reaperPid"]), int(tree["reaperStart"])
    except (KeyError, TypeError, ValueError):
        return 0
    pgid = tree.get("pgid")
    killed = kill_leftover_tree(reaper, start, None if pgid is None else int(pgid))
    if killed:
        log.warning(
            "session %s: killed %d processes an earlier agent left running", session_id, killed
        )
    return killed
