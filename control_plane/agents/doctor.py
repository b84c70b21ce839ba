"""``acpctl agents doctor``: can each agent run here, and what does it say it can do?

For one agent: how its name resolves (``resolve.py``), the command and installed version,
which environment variable *names* its configuration sets or forwards (values are never
read into the report), and a real ``initialize`` handshake with the process, spawned under
the reaper with the environment a session's launch would give it: the time to its answer,
the agent's name and version, and the capabilities the control plane uses (loadSession,
session resume and fork, MCP over HTTP). An agent that cannot be resolved, started or
initialized is not usable: the report says why and what would fix it."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from control_plane.agents.install import NotLocated, locate
from control_plane.agents.registry import snapshot
from control_plane.agents.resolve import (
    EXAMPLE_NAMES,
    AgentNotInstalled,
    ResolvedAgent,
    resolve_agent,
)
from protocol.secrets import Redactor
from state_machines import ControlPlaneError

if TYPE_CHECKING:
    from control_plane.config import Config

# The client capabilities the handshake announces: those of a session's launch by default.
CLIENT_INFO = {"name": "acp-control-plane", "title": "acpctl agents doctor", "version": "0.1.0"}


@dataclass
class EnvNames:
    configured: list[str] = field(default_factory=list)  # set in [agents.NAME] env
    passthrough_set: list[str] = field(default_factory=list)  # forwarded, set in this shell
    passthrough_unset: list[str] = field(default_factory=list)  # forwarded, missing here


@dataclass
class Handshake:
    seconds: float
    protocol_version: Any
    agent_name: str | None
    agent_version: str | None
    load_session: bool
    resume: bool
    fork: bool
    mcp_http: bool
    auth_methods: list[str]


@dataclass
class AgentReport:
    name: str
    source: str | None = None  # config | bundled | registry | command
    registry_id: str | None = None
    registry_version: str | None = None
    command: list[str] | None = None
    how: str | None = None  # installed | npx | uvx (registry agents)
    installed_version: str | None = None
    env: EnvNames = field(default_factory=EnvNames)
    handshake: Handshake | None = None
    usable: bool = False
    problem: str | None = None
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def names_to_check(config: Config) -> list[str]:
    """Without a name: the configured agents, the example, and the registry's agents that
    are installed here (the others are listed by ``agents list``, not started)."""
    names = [*config.agents, "example"]
    for entry in snapshot():
        if entry.id in config.agents:
            continue
        found = locate(entry)
        if not isinstance(found, NotLocated) and found.how == "installed":
            names.append(entry.id)
    return names


def describe(name: str, config: Config) -> tuple[AgentReport, ResolvedAgent | None]:
    """What resolution says about ``name``, without starting anything."""
    report = AgentReport(name)
    entry = snapshot().get(name)
    if entry is not None:
        report.registry_id, report.registry_version = entry.id, entry.version
    section = config.agents.get(name)
    if section is not None:
        report.env = _env_names(dict(section.env), section.passthrough)
    try:
        resolved = resolve_agent(name, config.agents)
    except AgentNotInstalled as exc:
        report.source = "registry"
        report.problem, report.fix = exc.reason, exc.fix
        return report, None
    except ControlPlaneError as exc:
        report.problem = str(exc)
        report.fix = "`acpctl agents list` shows the names; or configure [agents.NAME] command"
        return report, None
    report.source = resolved.source
    report.command = list(resolved.spec.command)
    if resolved.located is not None:
        report.how = resolved.located.how
        report.installed_version = resolved.located.version
    return report, resolved


def doctor(name: str, config: Config, timeout_s: float) -> AgentReport:
    """``describe`` and then the handshake."""
    report, resolved = describe(name, config)
    if resolved is None:
        return report
    env = config.agent_profiles().environment(resolved.spec.name)
    cwd = resolved.cwd or os.getcwd()
    try:
        report.handshake = handshake(resolved.spec.command, cwd, env, timeout_s)
    except (OSError, ControlPlaneError) as exc:
        # Its stderr may echo what it was given: no configured value reaches the report.
        redactor = Redactor(config.agent_profiles().secret_values(resolved.spec.name))
        report.problem = f"the agent did not complete initialize: {redactor.redact(str(exc))}"
        report.fix = _start_fix(report)
        return report
    report.usable = True
    return report


def _start_fix(report: AgentReport) -> str:
    if report.how in ("npx", "uvx"):
        return (
            f"{report.how} fetches the agent at its first start, which needs the network; "
            "install it instead (`acpctl agents show NAME` names the package)"
        )
    return "run the command by hand to see the whole of its error (the end of its stderr is above)"


def handshake(
    command: tuple[str, ...], cwd: str, env: Mapping[str, str], timeout_s: float
) -> Handshake:
    """Spawn the agent, exchange ``initialize``, stop it. ``OSError`` when it cannot be
    spawned; ``HandshakeFailed`` when it does not answer."""
    from protocol.agent.prestart import exchange_initialize, prestart

    params = {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}},
        "clientInfo": CLIENT_INFO,
    }
    with tempfile.TemporaryDirectory(prefix="acpctl-doctor-") as logs:
        started = time.perf_counter()
        spawned = prestart(command, cwd, env, os.path.join(logs, "stderr.log"))
        try:
            try:
                answer = exchange_initialize(spawned.popen, params, timeout_s).answer
            except ControlPlaneError as exc:
                tail = _tail(os.path.join(logs, "stderr.log"))
                raise type(exc)(f"{exc}{'; stderr: ' + tail if tail else ''}") from None
            seconds = time.perf_counter() - started
        finally:
            spawned.discard()
    return _read_answer(answer, seconds)


def _read_answer(answer: Mapping[str, Any], seconds: float) -> Handshake:
    caps = answer.get("agentCapabilities") or {}
    session_caps = caps.get("sessionCapabilities") or {}
    info = answer.get("agentInfo") or {}
    return Handshake(
        seconds=round(seconds, 3),
        protocol_version=answer.get("protocolVersion"),
        agent_name=info.get("name"),
        agent_version=info.get("version"),
        load_session=bool(caps.get("loadSession")),
        resume=session_caps.get("resume") not in (None, False),
        fork=session_caps.get("fork") not in (None, False),
        mcp_http=bool((caps.get("mcpCapabilities") or {}).get("http")),
        auth_methods=[str(m.get("id")) for m in answer.get("authMethods") or []],
    )


def _env_names(configured: dict[str, str], passthrough: list[str]) -> EnvNames:
    return EnvNames(
        configured=sorted(configured),
        passthrough_set=sorted(n for n in passthrough if os.environ.get(n)),
        passthrough_unset=sorted(n for n in passthrough if not os.environ.get(n)),
    )


def _tail(path: str, limit: int = 400) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace").strip().replace("\n", " | ")


def is_example(name: str) -> bool:
    return name in EXAMPLE_NAMES
