"""``acpctl agents doctor NAME`` with the three real agents by their registry names: each
resolves to its installed package, starts, and answers a real ``initialize``."""

from __future__ import annotations

from pathlib import Path

from .conftest import RealAgent
from .cp_helpers import ControlPlaneFiles

# What each pinned version advertises (tests/real_agents/package.json).
EXPECTED = {
    "claude": {"load_session": True, "resume": True, "mcp_http": True},
    "codex": {"load_session": True, "resume": True, "mcp_http": True},
    "gemini": {"load_session": True, "mcp_http": True},
}


def test_doctor_starts_the_agent_by_name_and_reports_its_capabilities(
    real_agent: RealAgent, tmp_path: Path
) -> None:
    cp = ControlPlaneFiles(tmp_path / "cp", real_agent.name)
    cp.write_config(real_agent.launch, by_name=True)
    (report,) = cp.json("agents", "doctor", real_agent.name, "--json", "--timeout", "90")
    assert report["usable"] is True, report
    assert report["source"] == "registry" and report["how"] == "installed", report
    assert report["installed_version"], report
    assert "/node_modules/.bin/" in report["command"][0], report
    shake = report["handshake"]
    assert shake["protocol_version"] == 1 and shake["seconds"] > 0
    for key, value in EXPECTED[real_agent.name].items():
        assert shake[key] is value, (key, shake)
    # Its env names come from the configuration; values never appear.
    assert "HOME" in report["env"]["configured"]
    secret = real_agent.launch.env.get("ANTHROPIC_API_KEY") or real_agent.launch.env.get(
        "GEMINI_API_KEY"
    )
    shown = cp.run("agents", "show", real_agent.name, "--json").stdout
    assert secret is None or secret not in shown
