"""Queue modes: what a new prompt does to the session's running turn and queue."""

from __future__ import annotations

from enum import StrEnum


class QueueMode(StrEnum):
    FOLLOWUP = "followup"  # each prompt is its own turn, in order (default)
    COLLECT = "collect"  # prompts queued during a turn merge into one next turn
    STEER = "steer"  # cancel the running turn; the new prompt runs next
    INTERRUPT = "interrupt"  # cancel the running turn and everything queued
