"""The ecosystem's telemetry conventions (control_plane/tracing.py): ``OTEL_SERVICE_NAME`` and
``OTEL_RESOURCE_ATTRIBUTES`` win over the configured service name, and the console exporter
writes one JSON object per line.

The real SDK throughout. Nothing here installs the process's tracer provider (OpenTelemetry
allows one per process, and tests/integration/test_tracing.py installs its own): the helpers
are tried on a local provider, and ``configure_tracing`` itself in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from control_plane.config import Config
from control_plane.config_sections import Tracing
from control_plane.tracing import build_resource, console_exporter

_OTEL_ENV = (
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS",
    "OTEL_TRACES_EXPORTER",
)


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _OTEL_ENV:
        monkeypatch.delenv(name, raising=False)


def test_neither_variable_set_keeps_the_configured_default() -> None:
    assert build_resource(Config()).attributes["service.name"] == "acpctl"
    configured = Config(tracing=Tracing(service_name="from-config"))
    assert build_resource(configured).attributes["service.name"] == "from-config"


def test_otel_service_name_wins_over_the_configured_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-worker")
    configured = Config(tracing=Tracing(service_name="from-config"))
    assert build_resource(configured).attributes["service.name"] == "billing-worker"


def test_otel_resource_attributes_all_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=x,deployment.environment=prod")
    attributes = build_resource(Config()).attributes
    assert attributes["service.name"] == "x"
    assert attributes["deployment.environment"] == "prod"


def test_otel_service_name_wins_over_the_attributes_service_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=x,deployment.environment=prod")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "y")
    attributes = build_resource(Config()).attributes
    assert attributes["service.name"] == "y"
    assert attributes["deployment.environment"] == "prod"


def test_attributes_without_a_service_name_keep_the_configured_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod")
    attributes = build_resource(Config()).attributes
    assert attributes["service.name"] == "acpctl"
    assert attributes["deployment.environment"] == "prod"


def test_the_console_exporter_writes_one_json_object_per_line_per_span() -> None:
    out = StringIO()
    provider = TracerProvider(resource=build_resource(Config()))
    provider.add_span_processor(SimpleSpanProcessor(console_exporter(out)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer", attributes={"a": 1}):
        for i in range(2):
            with tracer.start_as_current_span(f"inner {i}"):
                pass
    provider.shutdown()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    spans = [json.loads(line) for line in lines]
    assert [s["name"] for s in spans] == ["inner 0", "inner 1", "outer"]
    assert spans[2]["attributes"] == {"a": 1}
    assert spans[2]["resource"]["attributes"]["service.name"] == "acpctl"
    assert out.getvalue().endswith("\n")


def test_configure_tracing_applies_both_conventions_on_stderr() -> None:
    probe = """
from opentelemetry import trace
from control_plane.config import Config
from control_plane.tracing import configure_tracing
configure_tracing(Config())
tracer = trace.get_tracer("probe")
for name in ("one", "two"):
    with tracer.start_as_current_span(name):
        pass
trace.get_tracer_provider().shutdown()
"""
    env = {k: v for k, v in os.environ.items() if k not in _OTEL_ENV}
    env |= {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_SERVICE_NAME": "probe-service",
        "OTEL_RESOURCE_ATTRIBUTES": "service.name=x,deployment.environment=prod",
    }
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 0, run.stderr[-2000:]
    spans = [json.loads(line) for line in run.stderr.splitlines()]
    assert [s["name"] for s in spans] == ["one", "two"]
    for span in spans:
        resource = span["resource"]["attributes"]
        assert resource["service.name"] == "probe-service"
        assert resource["deployment.environment"] == "prod"
