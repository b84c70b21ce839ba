"""Prompt content: a plain string becomes one ACP text block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PromptInput = str | Sequence[dict[str, Any]]


def prompt_blocks(prompt: PromptInput) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    blocks = [dict(block) for block in prompt]
    for block in blocks:
        if not isinstance(block.get("type"), str):
            raise ValueError(f"a prompt content block needs a string 'type': {block!r}")
    return blocks
