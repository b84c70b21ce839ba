"""What one ``[[notify]]`` entry is, once the configuration has checked it: plain data the
delivery side can hold without importing the configuration (``control_plane`` is above it).

A hook's URL may carry a token (an ntfy topic, a Slack incoming-webhook path), so nothing
that leaves the process names it: logs and metric labels use ``label`` (the configured
``name``, else ``hook<N>`` by position), the store keys the hook's checkpoint by ``key`` (the
name, else a digest of the URL), and ``masked_url`` keeps the scheme and host only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import urlsplit

from state_machines.event_kinds import EventKind


class NotifyType(StrEnum):
    """What a notification is about (the ``events`` a hook lists)."""

    PERMISSION_REQUESTED = "permission_requested"  # an agent waits for a permission answer
    TURN_ENDED = "turn_ended"  # the agent answered a prompt
    TASK_FAILED = "task_failed"  # a batch task's session failed a turn or could not start
    BUDGET_EXCEEDED = "budget_exceeded"  # a stop budget stopped the session
    SESSION_ERROR = "session_error"  # the session moved to error (its agent died or failed)
    TEST = "test"  # ``acpctl notify test`` (never from the log)


LOG_TYPES = tuple(t for t in NotifyType if t is not NotifyType.TEST)

# The log's kinds each type is found in (task_failed and session_error: the events that
# move a session to ``error``; which of the two a failure is depends on its session).
KINDS: dict[NotifyType, frozenset[str]] = {
    NotifyType.PERMISSION_REQUESTED: frozenset({EventKind.PERMISSION_REQUESTED}),
    NotifyType.TURN_ENDED: frozenset({EventKind.TURN_ENDED}),
    NotifyType.TASK_FAILED: frozenset({EventKind.TURN_FAILED, EventKind.AGENT_START_FAILED}),
    NotifyType.BUDGET_EXCEEDED: frozenset({EventKind.BUDGET_EXCEEDED}),
    NotifyType.SESSION_ERROR: frozenset({EventKind.TURN_FAILED, EventKind.AGENT_START_FAILED}),
    NotifyType.TEST: frozenset(),
}


class Format(StrEnum):
    JSON = "json"  # our schema (docs/notify.md)
    SLACK = "slack"  # an incoming webhook's {"text": ...}
    NTFY = "ntfy"  # ntfy's plain-text body with Title, Click and Tags headers


@dataclass(frozen=True)
class HookSpec:
    url: str = field(repr=False)  # may hold a token
    events: frozenset[NotifyType]
    label: str  # what logs and metrics call it (never the URL)
    key: str  # what the store keys its checkpoint by
    format: Format = Format.JSON
    secret_env: str | None = None  # the variable's name; its value is read at each send
    timeout_s: float = 10.0
    console_url: str | None = None  # the console's base URL, for links

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset().union(*(KINDS[t] for t in self.events))

    @property
    def masked_url(self) -> str:
        return masked(self.url)


def hook_key(name: str | None, url: str) -> str:
    """A hook's checkpoint key: its name, else a digest of its URL (a changed URL, a new
    token, starts a new checkpoint at the log's end rather than replaying history)."""
    if name:
        return f"name:{name}"
    return "url:" + hashlib.sha256(url.encode()).hexdigest()[:24]


def masked(url: str) -> str:
    """``https://hooks.slack.com/…``: the scheme and host, never the path or query."""
    parts = urlsplit(url)
    port = "" if parts.port is None else f":{parts.port}"
    return f"{parts.scheme}://{parts.hostname or ''}{port}/…"
