"""OpenTelemetry traces with the SDK's in-memory exporter: a turn's span with its tool call
and permission wait as children, a subagent's turn linked to its parent's, and nothing at
all when tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from control_plane.config import Config, ConfigError
from control_plane.tracing import wanted
from tests.conftest import eventually
from tests.support.cp_harness import example_agent, open_cp

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (set once: OpenTelemetry allows one per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _named(found: tuple[ReadableSpan, ...], prefix: str, session: str) -> list[ReadableSpan]:
    return [
        s
        for s in found
        if s.name.startswith(prefix)
        and (s.attributes or {}).get("acpctl.session.id", session) == session
    ]


def test_a_turn_with_a_tool_call_and_a_permission(
    tmp_path: Path, spans: InMemorySpanExporter, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(example_agent(tmp_path), tmp_path, "#permission #tool look")
        sid = spawned.session.id
        assert spawned.command is not None and cp.wait(spawned.command.id, 30).ok
        command_id = spawned.command.id
    found = spans.get_finished_spans()
    (turn,) = _named(found, "invoke_agent example-agent", sid)
    attrs = dict(turn.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["acpctl.command.id"] == command_id and attrs["acpctl.outcome"] == "ok"
    assert attrs["acpctl.stop_reason"] == "end_turn" and attrs["acpctl.attempt"] == 1
    assert attrs["gen_ai.usage.input_tokens"] == 3  # three words in
    output_tokens = attrs["gen_ai.usage.output_tokens"]
    assert isinstance(output_tokens, int) and output_tokens > 0
    assert isinstance(attrs["acpctl.queue_wait_s"], float) and attrs["acpctl.node"]
    assert turn.context is not None
    trace_id, turn_id = turn.context.trace_id, turn.context.span_id
    children = [s for s in found if s.parent is not None and s.parent.span_id == turn_id]
    names = sorted(s.name for s in children)
    assert names == ["acp.permission", "execute_tool echo-tool"], names
    assert all(s.context is not None and s.context.trace_id == trace_id for s in children)
    tool = next(s for s in children if s.name.startswith("execute_tool"))
    assert (tool.attributes or {})["acpctl.tool.status"] == "completed"
    permission = next(s for s in children if s.name == "acp.permission")
    assert (permission.attributes or {})["acpctl.permission.outcome"] == "allow"
    (start,) = [
        s
        for s in found
        if s.name == "acp.agent_start" and (s.attributes or {}).get("acpctl.session.id") == sid
    ]
    assert start.context is not None
    assert [link.context.span_id for link in turn.links] == [start.context.span_id]


def test_a_subagents_turn_links_to_the_parent_turn_that_spawned_it(
    tmp_path: Path, spans: InMemorySpanExporter, db: str
) -> None:
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(example_agent(tmp_path), tmp_path, "#spawn=alpha_task go")
        assert parent.command is not None and cp.wait(parent.command.id, 60).ok
        (child,) = cp.children(parent.session.id)
        eventually(lambda: _named(spans.get_finished_spans(), "invoke_agent", child.id), 60)
        parent_id = parent.session.id
    found = spans.get_finished_spans()
    parent_turn = _named(found, "invoke_agent", parent_id)[0]
    (child_turn,) = _named(found, "invoke_agent", child.id)
    assert parent_turn.context is not None
    linked = [link.context.span_id for link in child_turn.links]
    assert parent_turn.context.span_id in linked
    assert child.metadata["traceParent"].startswith("00-")


def test_nothing_is_traced_or_exported_when_tracing_is_off(tmp_path: Path, db: str) -> None:
    assert wanted(Config()) is None
    probe = """
import sys
from pathlib import Path
from opentelemetry import trace
from tests.support.cp_harness import example_agent, open_cp
tmp = Path(sys.argv[1])
with open_cp(tmp, sys.argv[2]) as cp:
    s = cp.spawn(example_agent(tmp), tmp, "#tool hi")
    assert cp.wait(s.command.id, 30).ok
print(type(trace.get_tracer_provider()).__name__)
"""
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    off = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path), db],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": root},
    )
    assert off.returncode == 0, off.stderr[-2000:]
    assert off.stdout.strip() == "ProxyTracerProvider"  # the API's no-op: no SDK, no spans
    assert "invoke_agent" not in off.stderr


def test_the_console_exporter_prints_the_turn_span_when_asked(tmp_path: Path, db: str) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "#chunks=2 hi"}) + "\n")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "ACPCTL_CONFIG": str(tmp_path / "c")}
    (tmp_path / "c").write_text("")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "control_plane.cli",
            "--db",
            db,
            "batch",
            str(tasks),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert '"name": "invoke_agent example-agent"' in run.stderr
    assert '"gen_ai.usage.output_tokens": 2' in run.stderr


def test_tracing_asked_for_without_the_sdk_says_what_to_install(tmp_path: Path) -> None:
    probe = """
import builtins, sys
real = builtins.__import__
def no_sdk(name, *a, **k):
    if name.startswith("opentelemetry.sdk"):
        raise ImportError(name)
    return real(name, *a, **k)
builtins.__import__ = no_sdk
from control_plane.config import Config, Tracing
from control_plane.tracing import configure_tracing
try:
    configure_tracing(Config(tracing=Tracing(enabled=True)))
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    root = str(Path(__file__).resolve().parents[2])
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert run.stdout.startswith(ConfigError.__name__), run.stdout + run.stderr
    assert "acp-control-plane[tracing]" in run.stdout
