"""The transcript format's entries as strict pydantic models, one per entry type and message
role (versions 1 to 3): required fields present with the right JSON type, unknown extra
fields allowed (extensions add them). ``ENTRY_MODELS`` maps an entry's ``type`` to its model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# --------------------------------------------------------------------------- models


class Strict(BaseModel):
    # strict: a JSON string "3" must not pass as a number, nor true as 1.
    # extra="allow": extensions and newer writers add fields; they are not errors.
    model_config = ConfigDict(strict=True, extra="allow")


Number = int | float


class TextBlock(Strict):
    type: Literal["text"]
    text: str


class ImageBlock(Strict):
    type: Literal["image"]
    data: str
    mimeType: str


class ThinkingBlock(Strict):
    type: Literal["thinking"]
    thinking: str


class ToolCallBlock(Strict):
    type: Literal["toolCall"]
    id: str
    name: str
    arguments: dict[str, Any]


_UserBlock = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]
_AssistantBlock = Annotated[TextBlock | ThinkingBlock | ToolCallBlock, Field(discriminator="type")]


class Cost(Strict):
    input: Number
    output: Number
    cacheRead: Number
    cacheWrite: Number
    total: Number


class Usage(Strict):
    input: Number
    output: Number
    cacheRead: Number
    cacheWrite: Number
    totalTokens: Number
    cost: Cost


class UserMessage(Strict):
    role: Literal["user"]
    content: str | list[_UserBlock]
    timestamp: Number


class AssistantMessage(Strict):
    role: Literal["assistant"]
    content: list[_AssistantBlock]
    api: str
    provider: str
    model: str
    usage: Usage
    stopReason: Literal["stop", "length", "toolUse", "error", "aborted"]
    timestamp: Number
    errorMessage: str | None = None


class ToolResultMessage(Strict):
    role: Literal["toolResult"]
    toolCallId: str
    toolName: str
    content: list[_UserBlock]
    isError: bool
    timestamp: Number


class CustomMessage(Strict):
    role: Literal["custom"]
    customType: str
    content: str | list[_UserBlock]
    display: bool
    timestamp: Number


class OtherMessage(Strict):
    # pi stores further agent-side roles (bashExecution, branchSummary, ...); their shape is
    # pi's business, so only the discriminating role is checked.
    role: str


MESSAGE_MODELS: dict[str, type[Strict]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "toolResult": ToolResultMessage,
    "custom": CustomMessage,
}


class Header(Strict):
    type: Literal["session"]
    id: str
    timestamp: str
    cwd: str
    version: Literal[1, 2, 3] = 1
    parentSession: str | None = None


class HeaderV1(Header):
    # The oldest files may predate the cwd field.
    cwd: str = ""


class TreeFields(Strict):
    """Fields every v2/v3 entry carries; parentId must be present even when null."""

    type: str
    id: str
    parentId: str | None
    timestamp: str


class LinearFields(Strict):
    """v1 entries form a plain list and have no id/parentId."""

    type: str
    timestamp: str


class MessageEntry(Strict):
    message: dict[str, Any]


class ModelChangeEntry(Strict):
    provider: str
    modelId: str


class ThinkingLevelChangeEntry(Strict):
    thinkingLevel: str


class CompactionEntry(Strict):
    summary: str
    firstKeptEntryId: str
    tokensBefore: Number
    details: Any = None
    fromHook: bool | None = None


class CompactionEntryV1(CompactionEntry):
    # v1 pointed at the first kept entry by list index instead of by id.
    firstKeptEntryId: str | None = None  # type: ignore[assignment]
    firstKeptEntryIndex: int | None = None


class BranchSummaryEntry(Strict):
    fromId: str
    summary: str
    details: Any = None
    fromHook: bool | None = None


class CustomEntry(Strict):
    customType: str
    data: Any = None


class CustomMessageEntry(Strict):
    customType: str
    content: str | list[_UserBlock]
    display: bool
    details: Any = None


class LabelEntry(Strict):
    targetId: str
    label: str | None = None


class SessionInfoEntry(Strict):
    name: str | None = None


ENTRY_MODELS: dict[str, type[Strict]] = {
    "message": MessageEntry,
    "model_change": ModelChangeEntry,
    "thinking_level_change": ThinkingLevelChangeEntry,
    "compaction": CompactionEntry,
    "branch_summary": BranchSummaryEntry,
    "custom": CustomEntry,
    "custom_message": CustomMessageEntry,
    "label": LabelEntry,
    "session_info": SessionInfoEntry,
}
