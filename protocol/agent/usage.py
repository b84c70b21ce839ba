"""The tokens of one turn as the agent reported them, in ACP's ``Usage`` shape.

ACP puts them in the prompt response's ``usage`` (Claude Code does). Gemini CLI sends none
there but reports the turn's tokens in the response's ``_meta.quota.token_count``
(``input_tokens``, ``output_tokens``), so that is read too, marked with its ``source``.
Nothing is estimated: an agent that reports neither (codex-acp 0.16) used nothing as far as
the control plane can tell."""

from __future__ import annotations

from typing import Any

from acp.schema import PromptResponse

GEMINI_QUOTA = "_meta.quota.token_count"


def reported_usage(response: PromptResponse) -> dict[str, Any] | None:
    if response.usage is not None:
        usage: dict[str, Any] = response.usage.model_dump(by_alias=True, exclude_none=True)
        return usage
    quota = (response.field_meta or {}).get("quota")
    tokens = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(tokens, dict):
        return None
    inputs, outputs = tokens.get("input_tokens"), tokens.get("output_tokens")
    if not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (inputs, outputs)
    ):
        return None
    assert isinstance(inputs, int) and isinstance(outputs, int)
    found: dict[str, Any] = {
        "inputTokens": inputs,
        "outputTokens": outputs,
        "totalTokens": inputs + outputs,
        "source": GEMINI_QUOTA,
    }
    models = quota.get("model_usage") if isinstance(quota, dict) else None
    if isinstance(models, list) and len(models) == 1 and isinstance(models[0], dict):
        model = models[0].get("model")
        if isinstance(model, str) and model:
            found["model"] = model  # for the price table (by model) and the turn's span
    return found
