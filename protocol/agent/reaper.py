"""A reaper for an agent's whole process tree: the control plane's direct child.

Agents are adapters with process trees (Node runs a CLI, which runs ``bash -c ...``). A
parent-death signal on the direct child alone lets grandchildren finish their side effects
after a kill -9 of the control plane, while a restarted control plane re-runs the turn. So
the control plane starts ``python reaper.py --parent-pid PID -- CMD ARGS...`` (see
:func:`reaper_argv`), which

* becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``): every orphaned descendant, also one
  that called ``setsid`` or double-forked, is re-parented to it;
* asks for :data:`PARENT_DEATH_SIGNAL` when its parent thread dies (``PR_SET_PDEATHSIG``) and
  then checks ``getppid()`` against ``--parent-pid``: a parent that died before the prctl
  means exit 1 without starting anything. The signal also comes when only the spawning
  *thread* of a still-live parent ends; ``getppid()`` is unchanged then and it is ignored;
* ignores SIGINT, SIGQUIT, SIGTSTP and SIGHUP (a terminal's Ctrl-C is the control plane's
  business), and starts CMD in a process group of its own (pgid = agent pid), so the
  terminal's signals never reach the agent either; the agent gets ``PR_SET_PDEATHSIG=SIGKILL``
  relative to the reaper, in case the reaper itself is SIGKILLed; with ``--nice N`` the agent
  (and so its whole tree) runs N steps nicer than the control plane, which stays responsive
  while agents start or run builds (the reaper itself keeps the control plane's priority);
* hands stdin, stdout and stderr to the agent unchanged and points its own stdin and stdout
  at /dev/null (it never writes to stdout; diagnostics, only on real problems, go to stderr
  prefixed with ``acp-reaper:``);
* waits for children. When the agent exits, the rest of the tree is killed and the reaper
  exits with the agent's status (its exit code, or 128 + the signal that killed it). On the
  parent-death signal the tree is SIGKILLed at once (exit 128 + SIGKILL); on SIGTERM the
  agent's group first gets SIGTERM and up to ``--term-grace`` seconds (default 0: none) to
  exit, then the tree is SIGKILLed (exit: the agent's status if it exited within the grace,
  else 128 + SIGTERM).

Killing the tree: ``killpg(agent, SIGKILL)``, then every remaining descendant (found through
``/proc/PID/task/TID/children``) is SIGKILLed and reaped, round after round, until the reaper
has no child left, bounded by :data:`KILL_BOUND_S`.

The agent's environment gets :data:`MARKER_ENV` = ``"<reaper pid>.<reaper start time>"``;
descendants that keep their environment can so be found by :func:`kill_leftover_tree` even
outside the agent's process group (after the reaper itself was SIGKILLed).

The module imports only ``ctypes``, ``os``, ``_signal``, ``sys`` and ``time``. The control
plane runs it as ``python -I -S -c "<put the package's parent first on sys.path; import
protocol.agent.reaper; main()>"``: no site, no PYTHON* variables, no cwd on sys.path, so nothing of
the agent's environment or cwd matters, and the cached bytecode is used. ``python -m
protocol.agent.reaper`` and ``python -I -S path/to/reaper.py`` work too, slower to start.

SIGKILL of the reaper itself cannot be caught: the agent dies of its parent-death signal,
but its descendants survive (re-parented upwards). Stop a reaper with SIGTERM; after a
SIGKILL (or to be sure), :func:`kill_leftover_tree` finds what is left.

Only Linux has these primitives; elsewhere :func:`reaper_argv` returns the command unchanged,
so there an agent (and its tree) is not tied to the control plane's life at all.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

from protocol.agent.proc_tree import MARKER_ENV, descendants, process_start_time

# Start-up time matters (the reaper runs before every agent): ``signal`` costs ~4 ms for its
# enums, so the reaper uses the C module under it; the names and ints are the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:
    import _signal as signal

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DEATH_SIGNAL = signal.SIGUSR1
"""Sent by the kernel to the reaper when its parent thread dies."""
KILL_BOUND_S = 5.0
"""How long the reaper keeps killing and reaping a tree before giving up (D-state processes)."""
REAPER_PATH = os.path.abspath(__file__)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(REAPER_PATH)))  # above protocol/agent/
# Run by import rather than as a script, so that the cached bytecode is used (compiling this
# file costs ~3 ms); ``-I -S``: no site, no PYTHON* variables, no cwd on sys.path.
_BOOT = (
    f"import sys; sys.path.insert(0, {_ROOT!r}); "
    "from protocol.agent.reaper import main; sys.exit(main())"
)
_PREFIX = b"acp-reaper: "
_IGNORED = (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGHUP)
_USAGE = "usage: reaper.py [--parent-pid PID] [--term-grace SECONDS] [--nice N] -- CMD [ARGS...]"


# -- the parent side -------------------------------------------------------------------------------


def reaper_argv(
    argv: tuple[str, ...],
    *,
    parent_pid: int,
    python: str = sys.executable,
    term_grace: float = 0,
    nice: int = 0,
) -> tuple[str, ...]:
    """The command line that runs ``argv`` under the reaper, for a control plane whose pid is
    ``parent_pid`` (spawning from a thread that stays alive), the agent ``nice`` steps nicer.
    Not on Linux: ``argv`` itself (no reaper, no parent-death signal, no niceness)."""
    if not sys.platform.startswith("linux"):
        return argv
    grace = ("--term-grace", repr(float(term_grace))) if term_grace else ()
    niceness = ("--nice", str(int(nice))) if nice else ()
    return (
        python,
        "-I",
        "-S",
        "-c",
        _BOOT,
        "--parent-pid",
        str(parent_pid),
        *grace,
        *niceness,
        "--",
        *argv,
    )


# -- the reaper process --------------------------------------------------------------------


def _warn(message: str) -> None:
    try:
        os.write(2, _PREFIX + message.encode(errors="replace") + b"\n")
    except OSError:
        return


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> None:
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}) failed: {os.strerror(errno)}")


def _signal(pid: int, signo: int, *, group: bool = False) -> bool:
    try:
        (os.killpg if group else os.kill)(pid, signo)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class _Reaper:
    def __init__(self, agent: int, parent: int, watched: set[signal.Signals]) -> None:
        self.agent = agent
        self.parent = parent
        self.watched = watched
        self.agent_status: int | None = None

    def reap(self) -> bool:
        """Reap every exited child; False once the reaper has no children left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.agent:
                self.agent_status = status

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent

    def kill_tree(self) -> None:
        me = os.getpid()
        deadline = time.monotonic() + KILL_BOUND_S
        while True:
            _signal(self.agent, signal.SIGKILL, group=True)
            for pid in descendants(me):
                _signal(pid, signal.SIGKILL)
            if not self.reap():
                return
            if time.monotonic() >= deadline:
                left = descendants(me)
                _warn(f"gave up after {KILL_BOUND_S}s; processes still alive: {left}")
                return
            signal.sigtimedwait({signal.SIGCHLD}, 0.01)

    def terminate(self, grace: float) -> None:
        """SIGTERM to the agent's group, then wait up to ``grace`` for the agent to exit."""
        if not _signal(self.agent, signal.SIGTERM, group=True):
            return
        deadline = time.monotonic() + grace
        waited = {signal.SIGCHLD, PARENT_DEATH_SIGNAL}
        while self.agent_status is None:
            left = deadline - time.monotonic()
            info = signal.sigtimedwait(waited, left) if left > 0 else None
            if info is None:
                return
            if info.si_signo == PARENT_DEATH_SIGNAL and self.parent_gone():
                return
            self.reap()

    def run(self, grace: float) -> int:
        while True:
            signo = signal.sigwaitinfo(self.watched).si_signo
            if signo == signal.SIGCHLD:
                self.reap()
                if self.agent_status is not None:
                    status = self.agent_status
                    self.kill_tree()
                    return _exit_code(status)
            elif signo == PARENT_DEATH_SIGNAL:
                if self.parent_gone():
                    self.kill_tree()
                    return 128 + signal.SIGKILL
            elif signo == signal.SIGTERM:
                if grace > 0:
                    self.terminate(grace)
                exited = self.agent_status
                self.kill_tree()
                return 128 + signal.SIGTERM if exited is None else _exit_code(exited)


def _parse(args: list[str]) -> tuple[int | None, float, int, list[str]]:
    parent: int | None = None
    grace = 0.0
    nice = 0
    i = 0
    while i < len(args) and args[i] != "--":
        opt, _, value = args[i].partition("=")
        if not value:
            if i + 1 >= len(args):
                raise ValueError(f"{opt} needs a value")
            i += 1
            value = args[i]
        if opt == "--parent-pid":
            parent = int(value)
        elif opt == "--term-grace":
            grace = float(value)
        elif opt == "--nice":
            nice = int(value)
            if not 0 <= nice <= 19:
                raise ValueError(f"--nice {nice}: from 0 (as the control plane) to 19")
        else:
            raise ValueError(f"unknown option {opt!r}")
        i += 1
    command = args[i + 1 :]
    if not command:
        raise ValueError("no command")
    return parent, grace, nice, command


def _spawn(
    command: list[str],
    libc: ctypes.CDLL,
    inherited_ignored: set[signal.Signals],
    mask: set[int | signal.Signals],
    nice: int,
) -> int:
    me = os.getpid()
    env = dict(os.environ)
    env[MARKER_ENV] = f"{me}.{process_start_time(me)}"
    pid = os.fork()
    if pid == 0:  # the agent-to-be: never return into the reaper's code
        code = 126
        try:
            os.setpgid(0, 0)
            _prctl(libc, PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != me:  # the reaper died already
                os._exit(1)
            for signo in _IGNORED:  # as the reaper got them
                keep = signo in inherited_ignored
                signal.signal(signo, signal.SIG_IGN if keep else signal.SIG_DFL)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores these two
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if nice:
                os.nice(nice)
            os.execvpe(command[0], command, env)
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            _warn(f"cannot run {command[0]!r}: {exc.strerror or exc}")
        finally:
            os._exit(code)
    try:  # also here, so that the group exists before any killpg of ours
        os.setpgid(pid, pid)
    except OSError:  # the child did it and exec'd already, or is gone: both fine
        return pid
    return pid


def _quiet_stdio() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    if null > 2:
        os.close(null)


def main(argv: list[str] | None = None) -> int:
    try:
        expected, grace, nice, command = _parse(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        _warn(f"{exc}\n{_USAGE}")
        return 2
    parent = os.getppid() if expected is None else expected
    inherited_ignored = {s for s in _IGNORED if signal.signal(s, signal.SIG_IGN) == signal.SIG_IGN}
    watched = {signal.SIGCHLD, signal.SIGTERM, PARENT_DEATH_SIGNAL}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
        _prctl(libc, PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    except (OSError, AttributeError) as exc:
        _warn(str(exc))
        return 1
    if os.getppid() != parent:
        _warn(f"parent {parent} is gone (parent is {os.getppid()}); not starting {command[0]!r}")
        return 1
    agent = _spawn(command, libc, inherited_ignored, mask, nice)
    _quiet_stdio()
    return _Reaper(agent, parent, watched).run(grace)


if __name__ == "__main__":
    sys.exit(main())
