"""OpenTelemetry spans of the control plane (``docs/observability.md``).

The OpenTelemetry API is always importable (the MCP SDK depends on it); without an SDK
tracer provider (``control_plane/tracing.py`` installs one when tracing is configured) every
span here is a no-op that costs a few attribute lookups.

``TURN_SPANS`` holds each session's running turn span in this process: a permission wait and
a spawned subagent find their parent there."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

# Read as ``tracing.TRACER`` at each use (bench/telemetry_overhead.py swaps it per turn).
TRACER: trace.Tracer = trace.get_tracer("acp-control-plane")
TURN_SPANS: dict[str, Span] = {}  # session id -> its running turn's span
_PROPAGATOR = TraceContextTextMapPropagator()


def turn_context(session_id: str) -> Context | None:
    """The context of the session's running turn span, to parent a span on (None: none)."""
    span = TURN_SPANS.get(session_id)
    return None if span is None else trace.set_span_in_context(span)


def traceparent_of(session_id: str) -> str | None:
    """The W3C ``traceparent`` of the session's running turn (for a child it spawns)."""
    context = turn_context(session_id)
    if context is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context)
    return carrier.get("traceparent")


def link_to(traceparent: Any) -> list[trace.Link]:
    """A link to the span a ``traceparent`` names (a subagent's parent turn); [] if none."""
    if not isinstance(traceparent, str):
        return []
    span_context = trace.get_current_span(
        _PROPAGATOR.extract({"traceparent": traceparent})
    ).get_span_context()
    return [trace.Link(span_context)] if span_context.is_valid else []
