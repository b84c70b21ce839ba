"""A turn's tokens as agents report them: ACP's ``usage``, or Gemini CLI's ``_meta.quota``."""

from __future__ import annotations

from typing import Any

import pytest
from acp.schema import PromptResponse

from protocol.agent.usage import GEMINI_QUOTA, reported_usage


def _response(**fields: Any) -> PromptResponse:
    return PromptResponse.model_validate({"stopReason": "end_turn", **fields})


def test_acp_usage_is_taken_as_is() -> None:
    usage = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15, "cachedReadTokens": 2}
    assert reported_usage(_response(usage=usage)) == usage


def test_gemini_quota_token_count_becomes_the_turns_usage() -> None:
    meta = {"quota": {"token_count": {"input_tokens": 10, "output_tokens": 5}}}
    assert reported_usage(_response(_meta=meta)) == {
        "inputTokens": 10,
        "outputTokens": 5,
        "totalTokens": 15,
        "source": GEMINI_QUOTA,
    }


def test_gemini_names_its_model_when_it_used_one() -> None:
    tokens = {"input_tokens": 10, "output_tokens": 5}
    meta = {"quota": {"token_count": tokens, "model_usage": [{"model": "gemini-2.5-flash"}]}}
    assert reported_usage(_response(_meta=meta))["model"] == "gemini-2.5-flash"  # type: ignore[index]


def test_acp_usage_wins_over_the_quota() -> None:
    meta = {"quota": {"token_count": {"input_tokens": 99, "output_tokens": 99}}}
    usage = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}
    assert reported_usage(_response(usage=usage, _meta=meta)) == usage


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {"quota": "x"},
        {"quota": {"token_count": {"input_tokens": "10", "output_tokens": 5}}},
        {"quota": {"token_count": {"input_tokens": -1, "output_tokens": 5}}},
        {"quota": {"token_count": {"input_tokens": True, "output_tokens": 5}}},
        {"quota": {"token_count": {"output_tokens": 5}}},
    ],
)
def test_no_or_malformed_reports_count_nothing(meta: dict[str, Any] | None) -> None:
    assert reported_usage(_response(**({} if meta is None else {"_meta": meta}))) is None
