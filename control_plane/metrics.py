"""Prometheus metrics: what the runtime counts as it goes (``store/telemetry.py``,
``actors/telemetry.py``) and, read at each scrape, the levels of this control plane and
its store (running turns, queued commands, live sessions, delivery lag, usage).

``acpctl serve --metrics HOST:PORT`` and ``acpctl batch --metrics HOST:PORT`` serve them in
the Prometheus text format at ``/metrics`` (the client library's own small HTTP server, on a
daemon thread); ``docs/observability.md`` lists every series."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from state_machines import ControlPlaneError, SessionState

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from control_plane.services import FrontEndServices


class MetricsAddressError(ControlPlaneError, ValueError):
    """``--metrics`` needs ``HOST:PORT`` with a port in 0-65535."""


def parse_address(value: str, flag: str = "--metrics") -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise MetricsAddressError(f"{flag} wants HOST:PORT (like 127.0.0.1:9464), not {value!r}")
    return host.strip("[]"), int(port)


class LevelsCollector(Collector):
    """The levels of one control plane, read when Prometheus scrapes."""

    def __init__(self, cp: FrontEndServices) -> None:
        self._cp = cp

    def collect(self) -> Iterator[GaugeMetricFamily]:
        levels = self._cp.levels()
        store = levels.store

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, value=value)

        yield gauge(
            "acpctl_running_turns", "Turns holding a slot in this process.", levels.running_turns
        )
        yield gauge(
            "acpctl_turns_waiting_for_slot",
            "Sessions with work waiting for one of max_running_turns' slots.",
            levels.waiting_turns,
        )
        yield gauge(
            "acpctl_live_sessions",
            "Sessions with a live actor in this process.",
            levels.live_sessions,
        )
        states = GaugeMetricFamily(
            "acpctl_sessions", "Sessions in the store, by state.", labels=["state"]
        )
        for state in SessionState:
            states.add_metric([state.value], store.sessions_by_state.get(state.value, 0))
        yield states
        yield gauge(
            "acpctl_queued_commands", "Commands queued in the store.", store.queued_commands
        )
        yield gauge(
            "acpctl_running_commands", "Commands running in the store.", store.running_commands
        )
        lag = GaugeMetricFamily(
            "acpctl_delivery_lag_events",
            "Events a binding has not delivered yet (bindings that trail only).",
            labels=["binding", "session"],
        )
        for binding, session, behind in store.delivery_lag:
            lag.add_metric([binding, session], behind)
        yield lag
        yield gauge(
            "acpctl_delivery_lag_events_sum",
            "Events not delivered yet, all bindings together.",
            sum(behind for _, _, behind in store.delivery_lag),
        )
        notify = GaugeMetricFamily(
            "acpctl_notify_lag_seconds",
            "Per webhook this process delivers (its name, else hook<N>): how long the oldest "
            "event of its kinds past its checkpoint has waited; 0 when caught up.",
            labels=["hook"],
        )
        for hook, seconds in levels.notify_lag:
            notify.add_metric([hook], seconds)
        yield notify
        yield gauge(
            "acpctl_usage_tokens",
            "Tokens every session in the store has reported (durable, all processes).",
            store.usage.total_tokens,
        )
        yield gauge(
            "acpctl_usage_cost_usd",
            "Cost every session in the store has reported, USD (durable, all processes).",
            store.usage.cost_usd,
        )
        yield gauge(
            "acpctl_sessions_stopped_by_budget",
            "Sessions a budget has stopped.",
            store.stopped_by_budget,
        )


class MetricsServer:
    """``/metrics`` for one control plane until ``close``."""

    def __init__(
        self, cp: FrontEndServices, host: str, port: int, registry: CollectorRegistry = REGISTRY
    ) -> None:
        self._registry = registry
        self._collector = LevelsCollector(cp)
        registry.register(self._collector)
        try:
            self._server: WSGIServer
            self._server, self._thread = start_http_server(port, host, registry)
        except BaseException:
            registry.unregister(self._collector)
            raise
        self.address = (host, self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._registry.unregister(self._collector)
