"""What a request to the stand-in model server (model_server.py) asks for: the directive a
test put in its prompt (``SAY``, ``RUN``, ``WRITE``, ``TOOL``), read from each API's request
body (the Anthropic Messages, OpenAI Responses and Gemini APIs), the text of a tool's result
coming back, and the reply the "model" gives."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

_DIRECTIVE_RE = re.compile(r"^[ \t]*(SAY|RUN|WRITE|TOOL)[ \t]+(.+?)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Directive:
    """What the scripted model should do for one request."""

    kind: str  # "say" | "run" | "write" | "tool" | "done" | "default"
    text: str = ""
    command: str = ""
    path: str = ""


def parse_directive(text: str) -> Directive:
    """Parse the script out of a user message text (the last directive line wins)."""
    matches = list(_DIRECTIVE_RE.finditer(text or ""))
    if not matches:
        return Directive("default", text="ok")
    verb, arg = matches[-1].group(1), matches[-1].group(2)
    if verb == "SAY":
        return Directive("say", text=arg)
    if verb == "RUN":
        return Directive("run", command=arg)
    if verb == "TOOL":  # TOOL <name> <JSON arguments>: any tool the agent offers by that name
        name, _, arguments = arg.partition(" ")
        return Directive("tool", command=name, text=arguments or "{}")
    path, _, content = arg.partition(" ")
    return Directive("write", path=path, text=content)


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    api: str  # "anthropic" | "openai" | "gemini" | "other"
    directive: Directive | None = None
    at: float = field(default_factory=time.time)


def chunks(text: str, n: int = 4) -> list[str]:
    """Split ``text`` into up to ``n`` non-empty pieces (at least 2 when possible)."""
    if len(text) <= 1:
        return [text] if text else []
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


def first_line(output: str) -> str:
    for line in (output or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def shell_output_text(raw: Any) -> str:
    """Best-effort extraction of the command's stdout from an agent's tool-result payload."""
    if isinstance(raw, list):
        return "\n".join(shell_output_text(x) for x in raw)
    if isinstance(raw, dict):
        for key in ("output", "stdout", "text", "content", "llmContent"):
            if key in raw:
                return shell_output_text(raw[key])
        return json.dumps(raw)
    text = "" if raw is None else str(raw)
    stripped = text.strip()
    if re.fullmatch(r"\(.*\bno output\)", stripped):  # "(Bash completed with no output)"
        return ""
    if stripped.startswith("{"):
        try:
            return shell_output_text(json.loads(stripped))
        except ValueError:
            pass
    # Codex: "Exit code: 0\nWall time: ...\nOutput:\n<stdout>"; Gemini: "Output: <stdout>\n..."
    m = re.search(r"(?:^|\n)Output:[ \t]*\n?(.*)", text, re.DOTALL)
    if m:
        out = m.group(1)
        if out.strip() in ("(empty)", ""):
            return ""
        return out
    return text


# ----------------------------------------------------------------------------------------------
# Per-API request analysis: (directive, tool result output or None, available tool names)
# ----------------------------------------------------------------------------------------------


def anthropic_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
    return "\n".join(parts)


def anthropic_analyse(body: dict[str, Any]) -> tuple[Directive, str | None]:
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "user":
        content = messages[-1].get("content")
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                return earlier_directive(messages, anthropic_text), shell_output_text(
                    results[-1].get("content")
                )
    for msg in reversed(messages):
        if msg.get("role") == "user":
            return parse_directive(anthropic_text(msg.get("content"))), None
    return Directive("default", text="ok"), None


def earlier_directive(messages: list[Any], text_of: Any) -> Directive:
    for msg in reversed(messages):
        if msg.get("role") in ("user", None):
            d = parse_directive(text_of(msg.get("content") or msg.get("parts")))
            if d.kind != "default":
                return d
    return Directive("default", text="ok")


def openai_item_text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else item
    if isinstance(content, str):
        return content
    return "\n".join(
        c.get("text", "")
        for c in content or []
        if isinstance(c, dict) and c.get("type") in ("input_text", "text", "output_text")
    )


def openai_analyse(body: dict[str, Any]) -> tuple[Directive, str | None]:
    items = body.get("input") or []
    if isinstance(items, str):
        return parse_directive(items), None
    user_items = [
        i
        for i in items
        if isinstance(i, dict) and i.get("role") == "user" and i.get("type", "message") == "message"
    ]
    last = items[-1] if items else {}
    directive = Directive("default", text="ok")
    for item in reversed(user_items):
        d = parse_directive(openai_item_text(item))
        if d.kind != "default":
            directive = d
            break
    if isinstance(last, dict) and last.get("type") in (
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
    ):
        return directive, shell_output_text(last.get("output"))
    if user_items:
        return parse_directive(openai_item_text(user_items[-1])), None
    return directive, None


def gemini_text(parts: Any) -> str:
    return "\n".join(p.get("text", "") for p in parts or [] if isinstance(p, dict) and "text" in p)


def gemini_analyse(body: dict[str, Any]) -> tuple[Directive, str | None]:
    contents = body.get("contents") or []
    if contents and contents[-1].get("role", "user") == "user":
        parts = contents[-1].get("parts") or []
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if responses:
            directive = Directive("default", text="ok")
            for c in reversed(contents):
                if c.get("role", "user") == "user":
                    d = parse_directive(gemini_text(c.get("parts")))
                    if d.kind != "default":
                        directive = d
                        break
            return directive, shell_output_text(responses[-1].get("response"))
    for c in reversed(contents):
        if c.get("role", "user") == "user":
            text = gemini_text(c.get("parts"))
            if text.strip():
                return parse_directive(text), None
    return Directive("default", text="ok"), None


def offered_tool(names: Any, wanted: str) -> str | None:
    """The agent's name for tool ``wanted``: MCP tools come prefixed by their server
    (Claude Code ``mcp__<server>__<tool>``, Codex and Gemini CLI their own ways)."""
    for name in names:
        if isinstance(name, str) and (name == wanted or name.endswith(f"_{wanted}")):
            return name
    return None


def tool_arguments(directive: Directive) -> dict[str, Any]:
    arguments: dict[str, Any] = json.loads(directive.text or "{}")
    return arguments


def final_text(directive: Directive, output: str) -> str:
    if directive.kind == "write":
        return f"done: wrote {directive.path}"
    line = first_line(output)
    return f"done: {line}" if line else "done"


def json_for_schema(schema: Any, name: str = "") -> Any:
    """A plausible value for a JSON schema (Gemini CLI's JSON side calls)."""
    if not isinstance(schema, dict):
        return "ok"
    if schema.get("enum"):
        values = schema["enum"]
        for preferred in ("user", "flash"):
            if preferred in values:
                return preferred
        return values[0]
    typ = str(schema.get("type", "object")).lower()
    if typ == "object":
        props = schema.get("properties") or {}
        return {k: json_for_schema(v, k) for k, v in props.items()}
    if typ == "array":
        return []
    if typ in ("boolean", "bool"):
        return False
    if typ in ("integer", "number"):
        return 0
    if name == "next_speaker":
        return "user"
    return "ok"
