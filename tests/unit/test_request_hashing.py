"""The idempotency hash must not change between versions: a key retried after an upgrade
compares its new hash with the stored one. ``canonical_payload`` (one encoding on the hot
path) must give exactly ``request_hash``, and that must stay the SHA-256 of the canonical
JSON of ``{"kind": ..., "payload": ...}``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.hashing import canonical_json, canonical_payload, request_hash

PAYLOADS: list[Any] = [
    {},
    {"content": [{"type": "text", "text": "Summarise the open pull requests."}]},
    {
        "b": 1,
        "a": [3.5, 1e16, -0.0, None, True],
        "ü": 'naïve \u2013 \u201cquotes\u201d \u2028 \n \\ "',
    },
    {"nested": {"z": {"y": {"x": [1, {"k": "v"}]}}}, "big": 2**70},
]


def _reference(kind: str, payload: Any) -> str:
    text = json.dumps(
        {"kind": kind, "payload": payload},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("kind", ["prompt", "set_mode", "naïve"])
def test_one_pass_hash_equals_the_reference(kind: str, payload: Any) -> None:
    text, digest = canonical_payload(kind, payload)
    assert digest == request_hash(kind, payload) == _reference(kind, payload)
    assert text == canonical_json(payload)
    assert json.loads(text) == payload


def test_the_hash_of_a_known_request_is_pinned() -> None:
    # Computed once and stored: if this changes, stored idempotency keys stop matching.
    payload = {"content": [{"type": "text", "text": "hello"}]}
    assert request_hash("prompt", payload) == _reference("prompt", payload)
    assert canonical_payload("prompt", payload)[1] == (
        hashlib.sha256(
            b'{"kind":"prompt","payload":{"content":[{"text":"hello","type":"text"}]}}'
        ).hexdigest()
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(kind=st.text(min_size=1, max_size=12), payload=json_values)
def test_one_pass_hash_equals_the_reference_for_any_json(kind: str, payload: Any) -> None:
    assert canonical_payload(kind, payload) == (canonical_json(payload), _reference(kind, payload))
