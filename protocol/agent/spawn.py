"""How an agent process is launched: an explicit environment, under our reaper.

Agents must not outlive the control plane, and neither may anything they started: after a
kill -9 of the control plane, a restart must never find two copies of one agent (or of a
shell command it ran) editing the same files. A parent-death signal on the direct child is
not enough, because real agents are adapters whose work runs in descendants. So every agent
runs under ``protocol.agent.reaper`` (a subreaper with a parent-death signal; the agent in its own
process group), which kills the whole tree when the control plane dies, when the agent exits
or when it is told to stop. Other platforms than Linux launch the agent directly.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping

from protocol.agent.reaper import reaper_argv

# Variables an agent needs to run at all; everything else must be configured explicitly,
# so API keys and tokens of the host never leak into an agent by accident.
ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "NODE_PATH",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    # The fourth XDG base directory: agents keep their sessions and logs there (Claude Code's
    # CLI and the example agent do); without it they wrote to the host user's default one.
    "XDG_STATE_HOME",
)


def agent_environment(
    configured: Mapping[str, str],
    passthrough: Iterable[str] = (),
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The allowlist from the host, plus ``passthrough`` names (e.g. an API key the user
    configured to forward), plus ``configured`` values, which win."""
    source = os.environ if source is None else source
    env = {k: source[k] for k in (*ENV_ALLOWLIST, *passthrough) if k in source}
    env.update(configured)
    return env


def under_reaper(
    argv: tuple[str, ...], env: Mapping[str, str], cwd: str, nice: int = 0
) -> tuple[str, ...]:
    """The command line that runs ``argv`` under the reaper of this process, ``nice`` steps
    nicer than the control plane (``RuntimeSettings.agent_nice``). Spawn it from a
    thread that lives as long as the agent (the protocol loop): the reaper's parent-death
    signal follows the spawning thread. ``FileNotFoundError`` when the program is not found
    on the agent's PATH (the reaper would only report it as exit code 127)."""
    program = argv[0]
    if os.sep in program:
        found = program if os.path.isabs(program) else os.path.join(cwd, program)
        if not os.access(found, os.X_OK):
            raise FileNotFoundError(f"{program!r} is not an executable file")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(f"{program!r} is not on the agent's PATH")
    return reaper_argv(argv, parent_pid=os.getpid(), nice=nice)
