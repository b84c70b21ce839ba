"""How an agent process is launched: an explicit environment and a parent-death signal.

Agents must not outlive the control plane: after a kill -9 of the control plane, a restart
must never find two copies of one agent editing the same files. On Linux the child asks the
kernel for SIGKILL when its parent thread dies (``PR_SET_PDEATHSIG``). ``preexec_fn`` is unsafe
in a threaded program, so the command is wrapped in util-linux ``setpriv --pdeathsig KILL``,
or, where that is missing, a tiny Python exec wrapper that sets the signal and execs.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Mapping

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


def with_parent_death_signal(argv: tuple[str, ...]) -> tuple[str, ...]:
    if not sys.platform.startswith("linux"):
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        return (setpriv, "--pdeathsig", "KILL", "--", *argv)
    return (sys.executable, "-m", "protocol.pdeathsig_exec", *argv)
