"""Webhook settings for tests: hooks pointed at a ``Receiver``, retried fast."""

from __future__ import annotations

from typing import Any

from actors.delivery.hooks import LOG_TYPES, Format, HookSpec, NotifyType, hook_key

CONSOLE = "https://console.example/"
EVERY = tuple(t.value for t in LOG_TYPES)


def hook_to(
    url: str,
    name: str = "test",
    events: tuple[str, ...] = EVERY,
    fmt: Format = Format.JSON,
    secret_env: str | None = None,
) -> HookSpec:
    return HookSpec(
        url=url,
        events=frozenset(NotifyType(e) for e in events),
        label=name,
        key=hook_key(name, url),
        format=fmt,
        secret_env=secret_env,
        timeout_s=5.0,
        console_url=CONSOLE,
    )


def fast(*hooks: HookSpec) -> dict[str, Any]:
    """``open_cp`` overrides: these hooks, retried after 20-200 ms, other processes'
    events looked for every 0.1 s."""
    return {"notify_hooks": hooks, "notify_backoff_s": (0.02, 0.2), "notify_poll_s": 0.1}
