"""Who is calling the subagent tools, as the kernel says: the process at the other end of a
connection, and whether it belongs to a session's agent.

The tools carry no secret. Every agent runs under its own reaper, a subreaper
(``protocol/agent/reaper.py``): each process the agent starts, and each one orphaned below it,
stays below the reaper. So a connection is a session's when the process holding its other
end is that reaper or below it. The kernel reports that process: ``SO_PEERCRED`` for the
Unix socket of the stdio MCP server, and for the loopback TCP of the HTTP tools, the socket's
inode in ``/proc/net/tcp`` and the process of the session's tree that has it open. A
bearer token handed to the agent could not be kept secret: Claude Code's SDK passes the
``mcpServers`` it is given, headers and all, on its CLI's command line (``--mcp-config``),
where every process of the user reads it in ``/proc/PID/cmdline``.

What this does not separate: sessions that share one agent process (``sessions_per_process``
above 1) are one tree, and so one caller.
"""

from __future__ import annotations

import os
import socket
import struct
import threading

from protocol.agent.proc_tree import descendants, parent_pid, process_start_time

SWEEP_EVERY = 256  # agent starts between two sweeps of the roots of every session
ANCESTRY_LIMIT = 64  # parents walked up from a caller before giving up (no tree is deeper)


class AgentTrees:
    """Each session's agent trees, by the reaper at each root: ``(pid, start time)``, which
    names one process across pid reuse. A session gets a root each time an agent starts for
    it; roots whose process is gone are dropped when next looked at. Any thread reads it."""

    def __init__(self) -> None:
        self._roots: dict[str, set[tuple[int, int]]] = {}
        self._lock = threading.Lock()
        self._binds = 0

    def bind(self, session_id: str, root_pid: int, root_start: int) -> None:
        with self._lock:
            self._roots.setdefault(session_id, set()).add((root_pid, root_start))
            self._binds += 1
            sweep = self._binds % SWEEP_EVERY == 0
        if sweep:  # sessions that ended are never looked up again: drop their dead roots
            with self._lock:
                sessions = list(self._roots)
            for session in sessions:
                self.roots(session)

    def roots(self, session_id: str) -> list[int]:
        """The session's live root pids ([] when none was bound here or all are gone)."""
        with self._lock:
            bound = list(self._roots.get(session_id, ()))
        live = [pid for pid, start in bound if process_start_time(pid) == start]
        if len(live) < len(bound):
            with self._lock:
                kept = {(p, s) for p, s in self._roots.get(session_id, ()) if p in live}
                if kept:
                    self._roots[session_id] = kept
                else:
                    self._roots.pop(session_id, None)
        return live

    def holds(self, session_id: str, pid: int) -> bool:
        """Whether process ``pid`` is a root of the session's or below one."""
        return any(is_below(pid, root) for root in self.roots(session_id))

    def holds_tcp(self, session_id: str, peer_port: int, local_port: int) -> bool:
        """Whether the loopback TCP connection from ``peer_port`` to ``local_port`` is held,
        at the peer's end, by a process of the session's tree."""
        roots = self.roots(session_id)
        inode = tcp_socket_inode(peer_port, local_port) if roots else None
        if inode is None:
            return False
        return any(has_socket(pid, inode) for root in roots for pid in [root, *descendants(root)])


def is_below(pid: int, root: int) -> bool:
    """Whether ``root`` is ``pid`` or one of its ancestors."""
    for _ in range(ANCESTRY_LIMIT):
        if pid == root:
            return True
        if pid <= 1:
            return False
        parent = parent_pid(pid)
        if parent is None:
            return False
        pid = parent
    return False


def unix_peer_pid(sock: socket.socket) -> int | None:
    """The pid at the other end of a connected Unix socket (``SO_PEERCRED``)."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid: int = struct.unpack("3i", raw)[0]
    return pid or None


_LOOPBACK = "0100007F"  # 127.0.0.1 as /proc/net/tcp writes it (little-endian hex)


def tcp_socket_inode(peer_port: int, local_port: int) -> int | None:
    """The inode of the client's end of the loopback connection ``127.0.0.1:peer_port ->
    127.0.0.1:local_port``, from ``/proc/net/tcp`` (this process's network namespace, which
    its agents share)."""
    wanted = f"{_LOOPBACK}:{peer_port:04X} {_LOOPBACK}:{local_port:04X}"
    try:
        with open("/proc/net/tcp") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 9 and f"{fields[1]} {fields[2]}" == wanted:
                    inode = int(fields[9])
                    return inode or None
    except OSError:
        return None
    return None


def has_socket(pid: int, inode: int) -> bool:
    """Whether process ``pid`` has the socket ``inode`` open."""
    target = f"socket:[{inode}]"
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{fd_dir}/{fd}") == target:
                return True
        except OSError:
            continue
    return False
