"""One POST of a webhook against a real receiver on 127.0.0.1: the headers, the signature,
each format's body, and what each kind of answer (or none) is taken to mean."""

from __future__ import annotations

import json
import socket

import pytest

from actors.delivery.hooks import Format, HookSpec, NotifyType, hook_key
from actors.delivery.notifications import Notification, console_link
from actors.delivery.webhook_post import post, signature
from tests.support.webhook_receiver import Reply, receiving

SECRET = "s3cret-value"


def hook(url: str, fmt: Format = Format.JSON, **kw: object) -> HookSpec:
    return HookSpec(
        url=url,
        events=frozenset({NotifyType.TURN_ENDED}),
        label="t",
        key=hook_key("t", url),
        format=fmt,
        **kw,  # type: ignore[arg-type]
    )


def note() -> Notification:
    return Notification(
        type=NotifyType.PERMISSION_REQUESTED,
        key="42",
        title="Permission needed: Edit <main.py> & more (example s1)",
        time=1_800_000_000.0,
        link=console_link("https://cp.example/", "s-1", "acpctl-permission-ab"),
        event_id=42,
        store_id="store-1",
        session={"id": "s-1", "agent": "example"},
        details={"requestId": "acpctl-permission-ab"},
    )


def test_a_signed_json_post_carries_the_key_the_type_and_a_signature_the_receiver_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    with receiving(SECRET) as receiver:
        answer = post(hook(receiver.url, secret_env="HOOK_SECRET"), note())
        (got,) = receiver.requests
    assert (answer.outcome, answer.status) == ("accepted", 200)
    assert got.signature_ok is True
    assert got.headers["X-Acpctl-Signature"] == signature(SECRET, got.body)
    assert got.key == "42" and got.headers["X-Acpctl-Event"] == "permission_requested"
    body = got.json()
    assert body["version"] == 1 and body["type"] == "permission_requested"
    assert body["eventId"] == 42 and body["session"]["id"] == "s-1"
    assert body["link"] == "https://cp.example/#/s/s-1?permission=acpctl-permission-ab"
    assert body["time"] == "2027-01-15T08:00:00Z"


def test_a_hook_without_its_secret_in_the_environment_sends_nothing_unsigned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HOOK_SECRET", raising=False)
    with receiving() as receiver:
        answer = post(hook(receiver.url, secret_env="HOOK_SECRET"), note())
        assert receiver.requests == []
    assert (answer.outcome, answer.reason) == ("retry", "secret_missing")
    assert "HOOK_SECRET" in answer.detail and SECRET not in answer.detail


def test_slack_gets_text_with_the_link_and_escaped_markup() -> None:
    with receiving() as receiver:
        post(hook(receiver.url, Format.SLACK), note())
        (got,) = receiver.requests
    text = got.json()["text"]
    assert "Edit &lt;main.py&gt; &amp; more" in text
    assert text.endswith(
        "<https://cp.example/#/s/s-1?permission=acpctl-permission-ab|Open in the acpctl console>"
    )


def test_ntfy_gets_plain_text_with_title_click_and_tags() -> None:
    with receiving() as receiver:
        post(hook(receiver.url, Format.NTFY), note())
        (got,) = receiver.requests
    assert got.body.decode() == note().title
    assert got.headers["Title"] == "acpctl: permission requested"
    assert got.headers["Click"] == "https://cp.example/#/s/s-1?permission=acpctl-permission-ab"
    assert got.headers["Tags"] == "lock" and got.headers["Priority"] == "high"


@pytest.mark.parametrize(
    ("reply", "outcome", "reason"),
    [
        (Reply(500), "retry", "http_5xx"),
        (Reply(503), "retry", "http_5xx"),
        (Reply(408), "retry", "http_408"),
        (Reply(404), "refused", "http_4xx"),
        (Reply(401), "refused", "http_4xx"),
        (Reply(302, headers={"Location": "http://127.0.0.1:1/"}), "refused", "redirect"),
        (Reply(drop=True), "retry", "connection"),
        (Reply(delay_s=1.0), "retry", "timeout"),
    ],
)
def test_what_an_answer_means(reply: Reply, outcome: str, reason: str) -> None:
    with receiving() as receiver:
        receiver.script = lambda _r, _n: reply
        answer = post(hook(receiver.url, timeout_s=0.3), note())
    assert (answer.outcome, answer.reason) == (outcome, reason)


def test_429_retry_after_is_honoured() -> None:
    with receiving() as receiver:
        receiver.script = lambda _r, _n: Reply(429, headers={"Retry-After": "7"})
        answer = post(hook(receiver.url), note())
    assert (answer.outcome, answer.reason, answer.retry_after_s) == ("retry", "http_429", 7.0)


def test_nobody_listening_is_a_connection_failure_and_the_url_is_never_in_the_answer() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/topic-token-xyz"
    answer = post(hook(url), note())
    assert (answer.outcome, answer.reason) == ("retry", "connection")
    assert "topic-token-xyz" not in json.dumps(answer.__dict__)
