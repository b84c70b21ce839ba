"""Where a registry agent's command is on this machine.

For an npm package: its executable in a ``node_modules`` that has it installed (the current
directory's and its parents', those on ``PATH`` as ``node_modules/.bin``, and the global one
next to ``node``), else an executable of that name on ``PATH``; else ``npx --yes PACKAGE``,
which downloads it at the first start (that needs the network: ``agents doctor`` says so).
A PyPI package: its executable on ``PATH``, else ``uvx``. A binary: its ``cmd`` on ``PATH``
(archives are not downloaded: the fix names the archive). An installed version is used
whatever the registry pins: a user who installed an agent chose its version."""

from __future__ import annotations

import json
import os
import platform as platform_module
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from control_plane.agents.registry import Distribution, RegistryAgent


@dataclass(frozen=True)
class Located:
    """How to run a registry agent here."""

    argv: tuple[str, ...]
    how: str  # "installed" | "npx" | "uvx"
    distribution: Distribution
    version: str | None = None  # of an installed package, when its package.json says
    where: str | None = None  # the installed executable

    @property
    def needs_network(self) -> bool:
        """``npx`` / ``uvx`` fetch the package on first use."""
        return self.how != "installed"


@dataclass(frozen=True)
class NotLocated:
    """Nothing runs this agent here: why, and what would."""

    reason: str
    fix: str


def this_platform() -> str:
    """The registry's platform name for this machine (``linux-x86_64``...)."""
    system = {"Linux": "linux", "Darwin": "darwin", "Windows": "windows"}.get(
        platform_module.system(), platform_module.system().lower()
    )
    machine = platform_module.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return f"{system}-{machine}"


def locate(
    agent: RegistryAgent, cwd: str | None = None, path: str | None = None
) -> Located | NotLocated:
    """The best way to run ``agent`` here: an installed copy first, then a package runner."""
    search_path = os.environ.get("PATH", "") if path is None else path
    distributions = agent.distributions(this_platform())
    for dist in distributions:
        found = _installed(dist, cwd or os.getcwd(), search_path)
        if found is not None:
            return found
    for dist in distributions:
        runner = {"npx": "npx", "uvx": "uvx"}.get(dist.kind)
        if runner and shutil.which(runner, path=search_path):
            return Located(_runner_argv(runner, dist), runner, dist)
    return _not_located(agent, distributions)


def _runner_argv(runner: str, dist: Distribution) -> tuple[str, ...]:
    assert dist.package is not None
    # npx --package P CMD / uvx --from P CMD runs an executable other than the default one.
    pick = {"npx": "--package", "uvx": "--from"}[runner]
    yes = ("--yes",) if runner == "npx" else ()
    head = (pick, dist.package, dist.cmd) if dist.cmd else (dist.package,)
    return (runner, *yes, *head, *dist.args)


def _not_located(agent: RegistryAgent, distributions: list[Distribution]) -> NotLocated:
    kinds = {d.kind for d in distributions}
    if "npx" in kinds:
        package = next(d.package_name for d in distributions if d.kind == "npx")
        return NotLocated(
            f"{agent.id} is an npm package ({package}): it is not installed and npx is not on PATH",
            f"install Node.js >= 20 (npx comes with it), or `npm install -g {package}`",
        )
    if "uvx" in kinds:
        package = next(d.package_name for d in distributions if d.kind == "uvx")
        return NotLocated(
            f"{agent.id} is a PyPI package ({package}): it is not on PATH and uvx is not",
            f"`pipx install {package}` or install uv (https://docs.astral.sh/uv/)",
        )
    binary = next((d for d in distributions if d.kind == "binary"), None)
    if binary is not None:
        name = os.path.basename(binary.cmd or agent.id)
        return NotLocated(
            f"{agent.id} is a binary ({name}) that is not on PATH",
            f"download {binary.archive}, extract it and put {name} on PATH",
        )
    platforms = ", ".join(agent.platforms) or "none"
    return NotLocated(
        f"{agent.id} has no distribution for {this_platform()} (binaries for: {platforms})",
        "configure its command yourself: [agents.NAME] command = ... in the config file",
    )


def _installed(dist: Distribution, cwd: str, path: str) -> Located | None:
    if dist.kind == "npx":
        return _npm_installed(dist, cwd, path)
    names = [os.path.basename(dist.cmd)] if dist.cmd else []
    if dist.kind == "uvx" and dist.package_name and distinctive(dist.package_name):
        names.append(dist.package_name)
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return Located((found, *dist.args), "installed", dist, where=found)
    return None


def _npm_installed(dist: Distribution, cwd: str, path: str) -> Located | None:
    package = dist.package_name
    assert package is not None
    for root in node_modules_roots(cwd, path):
        manifest = root / package / "package.json"
        if not manifest.is_file():
            continue
        info = _read_json(manifest)
        bin_name, bin_file = _pick_bin(package, info.get("bin"), dist.cmd)
        if bin_file is None:
            continue
        linked = root / ".bin" / bin_name
        exe = linked if os.access(linked, os.X_OK) else (manifest.parent / bin_file)
        if not os.access(exe, os.X_OK):
            continue
        raw_version = info.get("version")
        version = raw_version if isinstance(raw_version, str) else None
        return Located((str(exe), *dist.args), "installed", dist, version, str(exe))
    # An executable of the package's name on PATH (a global install elsewhere, or the same
    # adapter published under another scope, as registries move packages between owners).
    plain = package.rsplit("/", 1)[-1]
    for name in filter(None, (dist.cmd, plain if distinctive(plain) else None)):
        found = shutil.which(name, path=path)
        if found:
            version = _version_beside(Path(found))
            return Located((found, *dist.args), "installed", dist, version, found)
    return None


# Package names too common to stand for an agent when found on PATH (``@opencode/cli``,
# ``@kilocode/cli``): some other ``cli`` is not that agent.
GENERIC_NAMES = frozenset({"cli", "agent", "acp", "app", "server", "core", "main", "bin", "run"})


def distinctive(name: str) -> bool:
    return len(name) > 3 and name not in GENERIC_NAMES


def _pick_bin(package: str, bins: object, cmd: str | None) -> tuple[str, str | None]:
    """npx's choice: the ``cmd`` asked for, else the only executable, else the one named as
    the package (without its scope)."""
    plain = package.rsplit("/", 1)[-1]
    if isinstance(bins, str):
        return plain, bins
    if not isinstance(bins, dict) or not bins:
        return plain, None
    if cmd is not None:
        return cmd, bins.get(cmd)
    if len(bins) == 1:
        name, file = next(iter(bins.items()))
        return str(name), str(file)
    return plain, bins.get(plain)


def node_modules_roots(cwd: str, path: str) -> Iterator[Path]:
    """Directories npm installs packages into, nearest first."""
    seen: set[Path] = set()
    here = Path(cwd).resolve()
    candidates = [d / "node_modules" for d in (here, *here.parents)]
    for entry in path.split(os.pathsep):
        entry_path = Path(entry)
        if entry_path.name == ".bin" and entry_path.parent.name == "node_modules":
            candidates.append(entry_path.parent)
    node = shutil.which("node", path=path)
    if node:
        candidates.append(Path(os.path.realpath(node)).parent.parent / "lib" / "node_modules")
    prefix = os.environ.get("NPM_CONFIG_PREFIX")
    if prefix:
        candidates.append(Path(prefix) / "lib" / "node_modules")
    for candidate in candidates:
        if candidate not in seen and candidate.is_dir():
            seen.add(candidate)
            yield candidate


def _version_beside(executable: Path) -> str | None:
    """The version in the package.json above an executable's real file, if it has one."""
    try:
        real = executable.resolve()
    except OSError:
        return None
    for parent in list(real.parents)[:6]:
        manifest = parent / "package.json"
        if manifest.is_file():
            version = _read_json(manifest).get("version")
            return version if isinstance(version, str) else None
    return None


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
