"""Running git: one subprocess per command, its stderr in the error when it fails."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from state_machines import ControlPlaneError

# git's own environment variables that would point a command at another repository or
# index than the one named by -C (a hook or an outer git process may have set them).
_GIT_LOCATION_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX")


class WorkspaceError(ControlPlaneError):
    """A workspace that cannot be made, set up, checkpointed or restored: the reason (git's
    or the setup command's own words) and the path."""


def git(
    args: Sequence[str],
    cwd: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> str:
    """``git -C cwd ARGS``'s stdout; ``WorkspaceError`` with its stderr when it fails."""
    environment = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARIABLES}
    # Checkpoints are the control plane's commits: a fixed identity, no user config needed.
    environment.update(
        {
            "GIT_AUTHOR_NAME": "acpctl",
            "GIT_AUTHOR_EMAIL": "acpctl@localhost",
            "GIT_COMMITTER_NAME": "acpctl",
            "GIT_COMMITTER_EMAIL": "acpctl@localhost",
            "GIT_TERMINAL_PROMPT": "0",
        }
    )
    environment.update(env or {})
    try:
        done = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            text=True,
            env=environment,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise WorkspaceError("git is not installed (workspaces need git >= 2.20)") from None
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {' '.join(args[:2])} in {cwd} took over {timeout:g} s") from None
    if done.returncode != 0:
        detail = done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}"
        raise WorkspaceError(f"git {' '.join(args[:2])} in {cwd}: {detail}")
    return done.stdout
