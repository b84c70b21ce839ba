"""The runtime's Prometheus metrics (``docs/observability.md``): agent starts, recoveries and
agent updates, counted where they happen (turns and tokens are counted by the store, once
committed: ``store/telemetry.py``).

Module-level objects in the process's default registry; what is a level at a moment (running
turns, queued commands, live agents, delivery lag) is read at scrape time instead
(``control_plane/metrics.py``)."""

from __future__ import annotations

from prometheus_client import Counter

from store import RecoveryReport

SESSION_UPDATES = Counter(
    "acpctl_session_updates_total", "session/update notifications recorded from agents."
)
AGENT_STARTS = Counter(
    "acpctl_agent_starts_total",
    "Agent starts of sessions, by outcome: started (a process of its own or a new shared one), "
    "joined (a shared process that was running), failed.",
    ["outcome"],
)
CLAIM_OFFERS = Counter(
    "acpctl_claim_offers_total",
    "Prompts whose write took an idle session's claim offer, by what came of it: claimed (in "
    "the transaction that queued it), declined (the actor claimed it after, as without an "
    "offer), returned (claimed, then put back in the queue unsent: the actor could not start "
    "it).",
    ["outcome"],
)
RECOVERIES = Counter(
    "acpctl_recovered_commands_total",
    "Commands a recovery found cut short, by what it did (requeued, failed).",
    ["action"],
)


def recovered(report: RecoveryReport) -> None:
    RECOVERIES.labels("requeued").inc(len(report.requeued))
    RECOVERIES.labels("failed").inc(len(report.failed))


NOTIFY_DELIVERED = Counter(
    "acpctl_notify_delivered_total",
    "Webhook notifications a receiver accepted, by hook (its name, else hook<N>).",
    ["hook"],
)
NOTIFY_FAILURES = Counter(
    "acpctl_notify_failures_total",
    "Webhook sends that failed, by hook and reason: http_5xx, http_408, http_429, timeout, "
    "connection, secret_missing (retried); http_4xx, redirect (refused for good: skipped).",
    ["hook", "reason"],
)
