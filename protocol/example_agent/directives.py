"""The ``#`` words of a prompt (what the example agent is asked to do) and the reply they
make: parsing is strict, so a malformed directive answers -32602 rather than silently doing
something else."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from acp import (
    RequestError,
)
from acp.schema import (
    EmbeddedResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)

log = logging.getLogger("example_agent")


@dataclass
class Directives:
    """The ``#`` words of one prompt, parsed."""

    chunks: int | None = None
    updates: int | None = None
    delay_ms: int | None = None
    think_ms: int | None = None  # a pause before the turn's first update (a model thinking)
    tool: bool = False
    permission: bool = False
    read: str | None = None
    readlines: tuple[str, int, int] | None = None
    write: tuple[str, str] | None = None
    # #edit=PATH:CONTENT (a backslash and n: a line break): written through the client and
    # reported as an edit tool call whose content is the diff (path, oldText, newText)
    edit: tuple[str, str] | None = None
    plan: bool = False
    plan_steps: bool = False  # a plan sent again as each of its steps is done
    title: str | None = None
    unknown_update: bool = False
    hang: bool = False
    hang_hard: bool = False
    crash: bool = False
    garbage: bool = False
    flood_stderr: int | None = None
    oversize: int | None = None
    history: bool = False
    # Each chunk carries the agent's CLOCK_MONOTONIC in ns when it was sent ("c0@<ns> "),
    # so a client on the same machine can time every update from the agent's write.
    stamp: bool = False
    mcp_servers: bool = False  # reply with the names of the MCP servers offered
    cost_per_chunk: float | None = None  # a usage_update with the session's cost per chunk
    # MCP tool calls through the client's mcpServers: (tool name, arguments) in order
    mcp_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Make those calls claiming to be this other session (the session id in the offered
    # server's URL or --session argument replaced): what a hostile agent would try.
    mcp_as: str | None = None


_FLAGS = {"tool", "permission", "plan", "hang", "crash", "garbage", "history", "stamp"}


def parse_directives(text: str) -> tuple[Directives, str]:
    """Split prompt text into directives and the message (non-directive words, space-joined).

    A malformed directive value answers -32602 rather than silently doing something else.
    """
    d, words = Directives(), []
    for word in text.split():
        if not word.startswith("#"):
            words.append(word)
            continue
        name, _, value = word[1:].partition("=")
        try:
            _apply_directive(d, name, value)
        except ValueError as exc:
            raise RequestError.invalid_params({"directive": word, "details": str(exc)}) from exc
    return d, " ".join(words)


def _apply_directive(d: Directives, name: str, value: str) -> None:
    """Set the field for one ``#name=value`` word; unknown names are logged and ignored."""
    if name in _FLAGS:
        setattr(d, name, True)
    elif name in ("unknown-update", "hang-hard", "mcp-servers", "plan-steps"):
        setattr(d, name.replace("-", "_"), True)
    elif name in ("chunks", "updates", "delay", "think", "flood-stderr", "oversize"):
        number = int(value)
        if number < 0:
            raise ValueError("must be >= 0")
        fields = {"delay": "delay_ms", "think": "think_ms", "flood-stderr": "flood_stderr"}
        setattr(d, fields.get(name, name), number)
    elif name == "cost":
        cost = float(value)
        if not cost >= 0:  # also refuses NaN
            raise ValueError("must be a number >= 0")
        d.cost_per_chunk = cost
    elif name == "read":
        d.read = value
    elif name == "readlines":
        path, line, limit = value.rsplit(":", 2)
        d.readlines = (path, int(line), int(limit))
    elif name == "write":
        path, sep, content = value.partition(":")
        if not sep:
            raise ValueError("expected PATH:CONTENT")
        d.write = (path, content)
    elif name == "edit":
        path, sep, content = value.partition(":")
        if not sep or not path:
            raise ValueError("expected PATH:CONTENT")
        d.edit = (path, content.replace("\\n", "\n"))
    elif name == "title":
        d.title = value.replace("_", " ")
    elif name in ("spawn", "spawn-session"):
        mode = "session" if name == "spawn-session" else "run"
        for task in filter(None, value.split(",")):
            d.mcp_calls.append(("spawn_subagent", {"task": task.replace("_", " "), "mode": mode}))
    elif name == "spawn-agent":  # #spawn-agent=AGENT:task: a child of the named agent
        agent, sep, task = value.partition(":")
        if not sep or not agent:
            raise ValueError("expected AGENT:TASK")
        d.mcp_calls.append(("spawn_subagent", {"task": task.replace("_", " "), "agent": agent}))
    elif name == "mcp-as":
        d.mcp_as = value
    elif name == "list-subagents":
        d.mcp_calls.append(("list_subagents", {}))
    elif name == "subagent-result":
        d.mcp_calls.append(("subagent_result", {"id": value, "wait": 30}))
    elif name == "cancel-subagent":
        d.mcp_calls.append(("cancel_subagent", {"id": value}))
    elif name == "send-subagent":
        child, sep, message = value.partition(":")
        if not sep:
            raise ValueError("expected ID:MESSAGE")
        d.mcp_calls.append(
            ("send_to_subagent", {"id": child, "message": message.replace("_", " ")})
        )
    else:
        log.info("ignoring unknown directive #%s", name)


def prompt_text(blocks: list[Any]) -> str:
    """Join the text of text blocks and embedded text resources (other blocks carry none)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            block.resource, TextResourceContents
        ):
            parts.append(block.resource.text)
    return "\n".join(parts)


def split_words(text: str) -> list[str]:
    """Chunk a reply into words, each keeping the whitespace that follows it."""
    return re.findall(r"\S+\s*", text)


def reply_chunks(d: Directives, message: str, extras: list[str]) -> list[str]:
    """Build the reply: counted chunks or the echo, followed by directive results."""
    if d.updates is not None:
        base = [str(i) for i in range(d.updates)]
    elif d.chunks is not None:
        base = [f"c{i} " for i in range(d.chunks)]
    else:
        return split_words(" ".join([f"Echo: {message}", *extras]))
    if extras:
        if base:  # "#updates" chunks carry no trailing space; keep the extras a separate word
            base[-1] = base[-1].rstrip() + " "
        base += split_words(" ".join(extras))
    return base
