"""Turning tracing on: an OpenTelemetry SDK tracer provider with an exporter, when the
configuration (``[tracing]``) or the standard ``OTEL_*`` variables ask for it.

Off by default: then the spans of ``protocol/tracing.py`` and ``actors/session/turn_trace.py``
are the API's no-ops and nothing is exported. The SDK and the OTLP exporter are the optional
extra ``acp-control-plane[tracing]``; asking for tracing without them is a ``ConfigError``
that says what to install.

    [tracing]
    enabled = true
    exporter = "otlp"          # or "console" (spans as JSON on stderr)
    endpoint = "http://127.0.0.1:4318/v1/traces"   # else OTEL_EXPORTER_OTLP_* decide
    service_name = "acpctl"

``OTEL_TRACES_EXPORTER=otlp|console`` turns it on without a file (``none`` keeps it off), and
the exporter reads the other ``OTEL_EXPORTER_OTLP_*`` variables itself. The resource follows
the ecosystem's conventions: ``OTEL_SERVICE_NAME``, then a ``service.name`` in
``OTEL_RESOURCE_ATTRIBUTES``, win over ``service_name`` (which is only the default), and the
other ``OTEL_RESOURCE_ATTRIBUTES`` are kept. The console exporter writes one JSON object per
line, like the JSON logs on the same stderr."""

from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING, Any

from control_plane.config import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    from control_plane.config import Config

_installed: Any = None  # the provider this process installed (once)


def wanted(config: Config) -> str | None:
    """The exporter tracing should use, or None for off."""
    from_env = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if from_env == "none":
        return None
    if config.tracing.enabled:
        return config.tracing.exporter
    return from_env if from_env in ("otlp", "console") else None


def build_resource(config: Config) -> Resource:
    """The provider's resource: the SDK's own (``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME``, the latter winning for ``service.name``) plus this project's
    defaults for the keys the environment does not give. ``Resource.create`` lets the
    attributes passed to it override the environment's, so a default is passed only when the
    environment has no (non-empty) value for its key."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    from_env = OTELResourceDetector().detect().attributes
    defaults: dict[str, str] = {"service.name": config.tracing.service_name}
    return Resource.create({k: v for k, v in defaults.items() if not from_env.get(k)})


def console_exporter(out: IO[str]) -> ConsoleSpanExporter:
    """Spans as JSON, one object per line (the SDK's default is indented over many lines)."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")


def configure_tracing(config: Config) -> None:
    global _installed
    exporter_name = wanted(config)
    if exporter_name is None or _installed is not None:
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ConfigError(
            "tracing is configured but the OpenTelemetry SDK is not installed: "
            "pip install 'acp-control-plane[tracing]'"
        ) from None
    exporter: Any
    if exporter_name == "console":
        exporter = console_exporter(sys.stderr)
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "tracing with the OTLP exporter needs it installed: "
                "pip install 'acp-control-plane[tracing]'"
            ) from None
        endpoint = config.tracing.endpoint
        exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
    provider = TracerProvider(resource=build_resource(config))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _installed = provider
