"""Queue modes: what a new prompt does to the session's running turn and queue.

Here, at the bottom of the import graph, because the configuration names them (and must load
without the store) and the store's ``submit_prompt`` applies them.
"""

from __future__ import annotations

from enum import StrEnum


class QueueMode(StrEnum):
    """What a new prompt does to the session's running turn and queue."""

    FOLLOWUP = "followup"  # each prompt is its own turn, in order (default)
    COLLECT = "collect"  # prompts queued during a turn merge into one next turn
    STEER = "steer"  # cancel the running turn; the new prompt runs next
    INTERRUPT = "interrupt"  # cancel the running turn and everything queued
