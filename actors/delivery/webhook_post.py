"""One POST of one notification to one hook, and what its answer means.

Headers: ``Idempotency-Key`` (the event's id: a receiver that keeps the keys it has seen
drops the one resend a crash can cause), ``X-Acpctl-Event`` (the type) and, when the hook
has a secret, ``X-Acpctl-Signature: sha256=<hex HMAC-SHA256 of the body, keyed by the
secret>``. The secret's value is read from its variable at each send and goes nowhere else.

Answers: 2xx accepted. 5xx, 408, 429, a timeout, a refused or dropped connection: the
receiver could not take it *now*, retried (``Retry-After`` honoured). Any other 4xx, or a
redirect: a permanent refusal, the same body would be refused every time, so it is counted,
logged and skipped; a hook that stopped on it would hold back every later notification of
every session (docs/notify.md, "Retries").

The standard library's ``urllib``: one short POST needs no client dependency. Redirects are
not followed (urllib would turn a POST into a GET without its body).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal

from actors.delivery.hooks import HookSpec
from actors.delivery.notifications import Notification
from actors.delivery.webhook_formats import render

USER_AGENT = "acpctl-notify/1"
Outcome = Literal["accepted", "retry", "refused"]


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    reason: str  # "ok", "http_5xx", "http_408", "http_429", "http_4xx", "redirect",
    # "timeout", "connection", "secret_missing": the failures counter's label
    status: int | None = None
    elapsed_s: float = 0.0
    retry_after_s: float | None = None
    detail: str = ""  # for people: the status line or the error (never the URL)


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: what ``X-Acpctl-Signature`` carries (docs/notify.md shows the check)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # urllib raises the 3xx as an HTTPError


_OPENER = urllib.request.build_opener(_NoRedirects)


def post(hook: HookSpec, note: Notification) -> Answer:
    """Send ``note`` once; never raises for what a receiver or the network does."""
    body, headers = render(hook.format, note)
    headers |= {
        "User-Agent": USER_AGENT,
        "Idempotency-Key": note.key,
        "X-Acpctl-Event": note.type.value,
    }
    if hook.secret_env:
        secret = os.environ.get(hook.secret_env)
        if not secret:
            return Answer("retry", "secret_missing", detail=f"${hook.secret_env} is not set")
        headers["X-Acpctl-Signature"] = signature(secret, body)
    request = urllib.request.Request(hook.url, data=body, headers=headers, method="POST")
    started = time.monotonic()
    try:
        with _OPENER.open(request, timeout=hook.timeout_s) as response:
            response.read(65536)
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return _refused_or_retried(exc.code, exc.headers.get("Retry-After"), started)
    except (TimeoutError, urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        kind = "timeout" if isinstance(reason, TimeoutError) else "connection"
        return Answer(
            "retry", kind, elapsed_s=time.monotonic() - started, detail=type(reason).__name__
        )
    return _refused_or_retried(status, None, started)


def _refused_or_retried(status: int, retry_after: str | None, started: float) -> Answer:
    elapsed = time.monotonic() - started
    detail = f"HTTP {status}"
    if 200 <= status < 300:
        return Answer("accepted", "ok", status, elapsed, detail=detail)
    if status in (408, 429):
        wait = _retry_after(retry_after)
        return Answer("retry", f"http_{status}", status, elapsed, wait, detail)
    if status >= 500:
        return Answer("retry", "http_5xx", status, elapsed, _retry_after(retry_after), detail)
    if 300 <= status < 400:
        return Answer("refused", "redirect", status, elapsed, detail=detail)
    return Answer("refused", "http_4xx", status, elapsed, detail=detail)


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (a number, or an HTTP date); None when absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
