"""A scripted stand-in for the model APIs the real coding agents talk to.

One ``ModelServer`` listens on 127.0.0.1 (ephemeral port) and speaks, with streaming:

* the Anthropic Messages API (``POST /v1/messages`` with SSE, ``/v1/messages/count_tokens``,
  non-streaming calls such as title generation) -- used by Claude Code;
* the OpenAI Responses API (``POST /v1/responses`` with SSE) -- used by Codex;
* the Gemini API (``:streamGenerateContent?alt=sse``, ``:generateContent``, ``:countTokens``)
  -- used by Gemini CLI.

What the "model" does is decided by a script taken from the last user message of the request,
so a test chooses the behaviour through the prompt it sends.  Directives (one per line; the
last directive line of the last user message wins):

``SAY <text>``
    reply with ``<text>``, streamed in several chunks.
``RUN <shell command>``
    call the agent's shell tool with that command; when the request comes back carrying the
    tool result, reply ``done: <first line of the output>``.
``WRITE <relative path> <text>``
    call the agent's file-write tool; once the result comes back, reply ``done: wrote <path>``.

Anything else gets the reply ``ok``.  Every request is recorded in ``ModelServer.requests``.
The server also acts as a refusing HTTP(S) proxy: agents are launched with ``HTTPS_PROXY``
pointing here (and ``NO_PROXY`` for loopback), so any attempt to reach a non-local host lands in
``ModelServer.blocked`` instead of leaving the machine.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

__all__ = ["Directive", "ModelServer", "RecordedRequest", "parse_directive"]

_DIRECTIVE_RE = re.compile(r"^[ \t]*(SAY|RUN|WRITE)[ \t]+(.+?)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Directive:
    """What the scripted model should do for one request."""

    kind: str  # "say" | "run" | "write" | "done" | "default"
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


def _shell_output_text(raw: Any) -> str:
    """Best-effort extraction of the command's stdout from an agent's tool-result payload."""
    if isinstance(raw, list):
        return "\n".join(_shell_output_text(x) for x in raw)
    if isinstance(raw, dict):
        for key in ("output", "stdout", "text", "content", "llmContent"):
            if key in raw:
                return _shell_output_text(raw[key])
        return json.dumps(raw)
    text = "" if raw is None else str(raw)
    stripped = text.strip()
    if re.fullmatch(r"\(.*\bno output\)", stripped):  # "(Bash completed with no output)"
        return ""
    if stripped.startswith("{"):
        try:
            return _shell_output_text(json.loads(stripped))
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


def _anthropic_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
    return "\n".join(parts)


def _anthropic_analyse(body: dict[str, Any]) -> tuple[Directive, str | None]:
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "user":
        content = messages[-1].get("content")
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                return _earlier_directive(messages, _anthropic_text), _shell_output_text(
                    results[-1].get("content")
                )
    for msg in reversed(messages):
        if msg.get("role") == "user":
            return parse_directive(_anthropic_text(msg.get("content"))), None
    return Directive("default", text="ok"), None


def _earlier_directive(messages: list[Any], text_of: Any) -> Directive:
    for msg in reversed(messages):
        if msg.get("role") in ("user", None):
            d = parse_directive(text_of(msg.get("content") or msg.get("parts")))
            if d.kind != "default":
                return d
    return Directive("default", text="ok")


def _openai_item_text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else item
    if isinstance(content, str):
        return content
    return "\n".join(
        c.get("text", "")
        for c in content or []
        if isinstance(c, dict) and c.get("type") in ("input_text", "text", "output_text")
    )


def _openai_analyse(body: dict[str, Any]) -> tuple[Directive, str | None]:
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
        d = parse_directive(_openai_item_text(item))
        if d.kind != "default":
            directive = d
            break
    if isinstance(last, dict) and last.get("type") in (
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
    ):
        return directive, _shell_output_text(last.get("output"))
    if user_items:
        return parse_directive(_openai_item_text(user_items[-1])), None
    return directive, None


def _gemini_text(parts: Any) -> str:
    return "\n".join(p.get("text", "") for p in parts or [] if isinstance(p, dict) and "text" in p)


def _gemini_analyse(body: dict[str, Any]) -> tuple[Directive, str | None]:
    contents = body.get("contents") or []
    if contents and contents[-1].get("role", "user") == "user":
        parts = contents[-1].get("parts") or []
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if responses:
            directive = Directive("default", text="ok")
            for c in reversed(contents):
                if c.get("role", "user") == "user":
                    d = parse_directive(_gemini_text(c.get("parts")))
                    if d.kind != "default":
                        directive = d
                        break
            return directive, _shell_output_text(responses[-1].get("response"))
    for c in reversed(contents):
        if c.get("role", "user") == "user":
            text = _gemini_text(c.get("parts"))
            if text.strip():
                return parse_directive(text), None
    return Directive("default", text="ok"), None


def _final_text(directive: Directive, output: str) -> str:
    if directive.kind == "write":
        return f"done: wrote {directive.path}"
    line = first_line(output)
    return f"done: {line}" if line else "done"


def _json_for_schema(schema: Any, name: str = "") -> Any:
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
        return {k: _json_for_schema(v, k) for k, v in props.items()}
    if typ == "array":
        return []
    if typ in ("boolean", "bool"):
        return False
    if typ in ("integer", "number"):
        return 0
    if name == "next_speaker":
        return "user"
    return "ok"


class _ModelHTTPServer(ThreadingHTTPServer):
    """The HTTP server, carrying the ``ModelServer`` its handlers answer for."""

    model: ModelServer


class _Handler(BaseHTTPRequestHandler):
    server_version = "stand-in-model/1"
    protocol_version = "HTTP/1.1"

    @property
    def model(self) -> ModelServer:
        return cast(_ModelHTTPServer, self.server).model

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # --- proxy guard -------------------------------------------------------------------------
    def do_CONNECT(self) -> None:
        self.model._block(self.command, self.path, dict(self.headers))
        self._send_json(403, {"error": "stand-in model server: outbound traffic is blocked"})
        self.close_connection = True

    def _is_proxy_request(self) -> bool:
        return self.path.startswith("http://") or self.path.startswith("https://")

    # --- plumbing ----------------------------------------------------------------------------
    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = self._read_chunked()
        if not raw:
            return None
        if self.headers.get("Content-Encoding", "").lower() == "zstd":
            return {"_undecoded": len(raw)}
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _read_chunked(self) -> bytes:
        data = b""
        while True:
            size_line = self.rfile.readline().strip()
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    def _send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, data: Any, event: str | None = None) -> None:
        msg = ""
        if event:
            msg += f"event: {event}\n"
        msg += f"data: {json.dumps(data)}\n\n"
        self.wfile.write(msg.encode())
        self.wfile.flush()
        if self.model.chunk_delay:
            time.sleep(self.model.chunk_delay)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def _dispatch(self, method: str) -> None:
        if self._is_proxy_request():
            self._read_body()
            self.model._block(method, self.path, dict(self.headers))
            self._send_json(403, {"error": "stand-in model server: outbound traffic is blocked"})
            return
        url = urlsplit(self.path)
        body = self._read_body() if method == "POST" else None
        path = url.path
        if "/v1/messages" in path or path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/responses") or "/chat/completions" in path:
            api = "openai"
        elif (
            ":streamGenerateContent" in path
            or ":generateContent" in path
            or (":countTokens" in path or ":embedContent" in path or "/v1beta/models" in path)
        ):
            api = "gemini"
        else:
            api = "other"
        rec = RecordedRequest(method, path, parse_qs(url.query), dict(self.headers), body, api)
        with self.model._lock:
            self.model.requests.append(rec)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            getattr(self, f"_handle_{api}")(rec)

    # --- "other" -----------------------------------------------------------------------------
    def _handle_other(self, rec: RecordedRequest) -> None:
        if rec.path.rstrip("/").endswith("/models"):
            # model listings (OpenAI-style and Anthropic-style)
            self._send_json(200, {"data": [], "models": [], "object": "list", "has_more": False})
            return
        self._send_json(404, {"error": {"message": f"not served: {rec.path}"}})

    # --- Anthropic Messages ------------------------------------------------------------------
    def _handle_anthropic(self, rec: RecordedRequest) -> None:
        body = rec.body if isinstance(rec.body, dict) else {}
        if rec.path.endswith("/count_tokens"):
            self._send_json(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
            return
        if self.model._reject_key(self, "anthropic"):
            return
        directive, output = _anthropic_analyse(body)
        rec.directive = directive
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        model = body.get("model", "claude-stand-in")
        blocks: list[dict[str, Any]] = []
        stop = "end_turn"
        if output is not None:
            blocks.append({"type": "text", "text": _final_text(directive, output)})
        elif directive.kind == "run" and "Bash" in tools:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:20],
                    "name": "Bash",
                    "input": {"command": directive.command, "description": "Run the command"},
                }
            )
            stop = "tool_use"
        elif directive.kind == "write" and "Write" in tools:
            cwd = _claude_cwd(body)
            path = directive.path if directive.path.startswith("/") else f"{cwd}/{directive.path}"
            blocks.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:20],
                    "name": "Write",
                    "input": {"file_path": path, "content": directive.text + "\n"},
                }
            )
            stop = "tool_use"
        else:
            blocks.append({"type": "text", "text": directive.text or "ok"})
        usage = {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        msg_id = "msg_" + uuid.uuid4().hex[:20]
        if not body.get("stream"):
            self._send_json(
                200,
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": blocks,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": usage,
                },
            )
            return
        self._start_sse()
        start = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        self._sse({"type": "message_start", "message": start}, "message_start")
        self._sse({"type": "ping"}, "ping")
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                head: dict[str, Any] = {"type": "text", "text": ""}
                pieces = [{"type": "text_delta", "text": c} for c in chunks(block["text"])]
            else:
                head = {**block, "input": {}}
                pieces = [
                    {"type": "input_json_delta", "partial_json": c}
                    for c in chunks(json.dumps(block["input"]), 3)
                ]
            ev = {"type": "content_block_start", "index": index, "content_block": head}
            self._sse(ev, "content_block_start")
            for delta in pieces:
                ev = {"type": "content_block_delta", "index": index, "delta": delta}
                self._sse(ev, "content_block_delta")
            self._sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        self._sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
            "message_delta",
        )
        self._sse({"type": "message_stop"}, "message_stop")

    # --- OpenAI Responses --------------------------------------------------------------------
    def _handle_openai(self, rec: RecordedRequest) -> None:
        body = rec.body if isinstance(rec.body, dict) else {}
        if self.model._reject_key(self, "openai"):
            return
        directive, output = _openai_analyse(body)
        rec.directive = directive
        tools: dict[str, dict[str, Any]] = {}
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                tools[t.get("name") or t.get("type", "")] = t
        resp_id = "resp_" + uuid.uuid4().hex[:20]
        items: list[dict[str, Any]] = []
        if output is not None:
            items.append(_oa_message(_final_text(directive, output)))
        else:
            call = None
            if directive.kind == "run":
                call = _oa_shell_call(tools, directive.command)
            elif directive.kind == "write":
                call = _oa_write_call(tools, directive)
            items.append(call or _oa_message(directive.text or "ok"))
        self._start_sse()
        base = {"id": resp_id, "object": "response", "created_at": int(time.time())}
        base["model"] = body.get("model", "stand-in")
        self._sse(
            {"type": "response.created", "response": {**base, "status": "in_progress"}},
            "response.created",
        )
        for idx, item in enumerate(items):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                empty = {**item, "content": []}
                self._sse(
                    {"type": "response.output_item.added", "output_index": idx, "item": empty},
                    "response.output_item.added",
                )
                for piece in chunks(text):
                    self._sse(
                        {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": idx,
                            "content_index": 0,
                            "delta": piece,
                        },
                        "response.output_text.delta",
                    )
            else:
                self._sse(
                    {"type": "response.output_item.added", "output_index": idx, "item": item},
                    "response.output_item.added",
                )
            self._sse(
                {"type": "response.output_item.done", "output_index": idx, "item": item},
                "response.output_item.done",
            )
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        self._sse(
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": items, "usage": usage},
            },
            "response.completed",
        )

    # --- Gemini ------------------------------------------------------------------------------
    def _handle_gemini(self, rec: RecordedRequest) -> None:
        body = rec.body if isinstance(rec.body, dict) else {}
        if ":countTokens" in rec.path:
            self._send_json(200, {"totalTokens": max(1, len(json.dumps(body)) // 4)})
            return
        if ":embedContent" in rec.path:
            self._send_json(200, {"embedding": {"values": [0.0] * 8}})
            return
        if ":" not in rec.path.rsplit("/", 1)[-1]:
            self._send_json(200, {"name": rec.path.rsplit("/", 1)[-1], "models": []})
            return
        if self.model._reject_key(self, "gemini"):
            return
        directive, output = _gemini_analyse(body)
        rec.directive = directive
        gen_cfg = body.get("generationConfig") or {}
        schema = gen_cfg.get("responseJsonSchema") or gen_cfg.get("responseSchema")
        tools = set()
        for t in body.get("tools") or []:
            for fd in t.get("functionDeclarations") or []:
                tools.add(fd.get("name"))
        parts: list[dict[str, Any]] = []
        if schema or gen_cfg.get("responseMimeType") == "application/json":
            parts.append({"text": json.dumps(_json_for_schema(schema or {}))})
        elif output is not None:
            parts.append({"text": _final_text(directive, output)})
        elif directive.kind == "run" and "run_shell_command" in tools:
            args = {"command": directive.command, "description": "Run the command"}
            parts.append({"functionCall": {"name": "run_shell_command", "args": args}})
        elif directive.kind == "write" and "write_file" in tools:
            args = {"file_path": directive.path, "content": directive.text + "\n"}
            parts.append({"functionCall": {"name": "write_file", "args": args}})
        else:
            parts.append({"text": directive.text or "ok"})
        usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
        model = rec.path.rsplit("/", 1)[-1].split(":")[0]

        def frame(ps: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
            cand: dict[str, Any] = {"content": {"role": "model", "parts": ps}, "index": 0}
            if finish:
                cand["finishReason"] = finish
            return {"candidates": [cand], "usageMetadata": usage, "modelVersion": model}

        if ":streamGenerateContent" not in rec.path:
            self._send_json(200, frame(parts, "STOP"))
            return
        self._start_sse()
        frames: list[dict[str, Any]] = []
        for part in parts:
            if "text" in part:
                frames.extend(frame([{"text": c}], None) for c in chunks(part["text"]))
            else:
                frames.append(frame([part], None))
        frames[-1]["candidates"][0]["finishReason"] = "STOP"
        for f in frames:
            self._sse(f)


def _claude_cwd(body: dict[str, Any]) -> str:
    system = body.get("system")
    text = system if isinstance(system, str) else _anthropic_text(system)
    m = re.search(r"(?:Primary working directory|Working directory): (\S+)", text or "")
    return m.group(1) if m else "."


def _oa_message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_" + uuid.uuid4().hex[:20],
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _oa_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_" + uuid.uuid4().hex[:20],
        "call_id": "call_" + uuid.uuid4().hex[:20],
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def _oa_shell_call(tools: dict[str, dict[str, Any]], command: str) -> dict[str, Any] | None:
    if "shell_command" in tools:
        return _oa_call("shell_command", {"command": command})
    if "exec_command" in tools:
        return _oa_call("exec_command", {"cmd": command})
    if "shell" in tools:
        return _oa_call("shell", {"command": ["bash", "-lc", command]})
    if "local_shell" in tools:
        return {
            "type": "local_shell_call",
            "id": "lsh_" + uuid.uuid4().hex[:20],
            "call_id": "call_" + uuid.uuid4().hex[:20],
            "status": "completed",
            "action": {"type": "exec", "command": ["bash", "-lc", command]},
        }
    return None


def _oa_write_call(tools: dict[str, dict[str, Any]], d: Directive) -> dict[str, Any] | None:
    # Codex writes files through its shell (or apply_patch); use the shell for portability.
    content = d.text.replace("'", "'\\''")
    return _oa_shell_call(tools, f"printf '%s\\n' '{content}' > '{d.path}'")


class ModelServer:
    """Threaded stand-in model server on 127.0.0.1 with an ephemeral port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, chunk_delay: float = 0.01):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the stand-in model server only listens on loopback")
        self.requests: list[RecordedRequest] = []
        self.blocked: list[dict[str, Any]] = []
        self.chunk_delay = chunk_delay
        self.require_key: str | None = None  # when set, other keys get a 401
        self._lock = threading.Lock()
        self._httpd = _ModelHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.model = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="stand-in-model", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.blocked.clear()

    def requests_for(self, api: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.api == api]

    def _block(self, method: str, target: str, headers: dict[str, str]) -> None:
        with self._lock:
            self.blocked.append({"method": method, "target": target, "headers": headers})

    def _reject_key(self, handler: _Handler, api: str) -> bool:
        if self.require_key is None:
            return False
        h = handler.headers
        auth = h.get("Authorization", "").removeprefix("Bearer ").strip()
        url_key = parse_qs(urlsplit(handler.path).query).get("key", [""])[0]
        key = h.get("x-api-key") or h.get("x-goog-api-key") or url_key or auth
        if key == self.require_key:
            return False
        if api == "anthropic":
            err = {
                "type": "error",
                "error": {"type": "authentication_error", "message": "invalid x-api-key"},
            }
        elif api == "openai":
            err = {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            }
        else:
            err = {
                "error": {
                    "code": 400,
                    "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                }
            }
        handler._send_json(400 if api == "gemini" else 401, err)
        return True
