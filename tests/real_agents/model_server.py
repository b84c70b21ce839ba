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
``TOOL <name> <JSON arguments>``
    call the tool the agent offers under that name (an MCP tool's name may carry its server's
    prefix); once the result comes back, reply ``done: <first line of the result>``.

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from .model_requests import (
    Directive,
    RecordedRequest,
    anthropic_analyse,
    anthropic_text,
    chunks,
    final_text,
    gemini_analyse,
    json_for_schema,
    offered_tool,
    openai_analyse,
    parse_directive,
    tool_arguments,
)

__all__ = ["Directive", "ModelServer", "RecordedRequest", "parse_directive"]


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
        directive, output = anthropic_analyse(body)
        rec.directive = directive
        tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        model = body.get("model", "claude-stand-in")
        blocks: list[dict[str, Any]] = []
        stop = "end_turn"
        if output is not None:
            blocks.append({"type": "text", "text": final_text(directive, output)})
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
        elif directive.kind == "tool" and offered_tool(tools, directive.command):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:20],
                    "name": offered_tool(tools, directive.command),
                    "input": tool_arguments(directive),
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
        directive, output = openai_analyse(body)
        rec.directive = directive
        tools: dict[str, dict[str, Any]] = {}
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                tools[t.get("name") or t.get("type", "")] = t
        resp_id = "resp_" + uuid.uuid4().hex[:20]
        items: list[dict[str, Any]] = []
        if output is not None:
            items.append(_oa_message(final_text(directive, output)))
        else:
            call = None
            if directive.kind == "run":
                call = _oa_shell_call(tools, directive.command)
            elif directive.kind == "write":
                call = _oa_write_call(tools, directive)
            elif directive.kind == "tool":
                call = _oa_tool_call(tools, directive.command, tool_arguments(directive))
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
        directive, output = gemini_analyse(body)
        rec.directive = directive
        gen_cfg = body.get("generationConfig") or {}
        schema = gen_cfg.get("responseJsonSchema") or gen_cfg.get("responseSchema")
        tools = set()
        for t in body.get("tools") or []:
            for fd in t.get("functionDeclarations") or []:
                tools.add(fd.get("name"))
        parts: list[dict[str, Any]] = []
        if schema or gen_cfg.get("responseMimeType") == "application/json":
            parts.append({"text": json.dumps(json_for_schema(schema or {}))})
        elif output is not None:
            parts.append({"text": final_text(directive, output)})
        elif directive.kind == "run" and "run_shell_command" in tools:
            args = {"command": directive.command, "description": "Run the command"}
            parts.append({"functionCall": {"name": "run_shell_command", "args": args}})
        elif directive.kind == "write" and "write_file" in tools:
            args = {"file_path": directive.path, "content": directive.text + "\n"}
            parts.append({"functionCall": {"name": "write_file", "args": args}})
        elif directive.kind == "tool" and offered_tool(tools, directive.command):
            name = offered_tool(tools, directive.command)
            parts.append({"functionCall": {"name": name, "args": tool_arguments(directive)}})
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
    text = system if isinstance(system, str) else anthropic_text(system)
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


def _oa_tool_call(
    tools: dict[str, dict[str, Any]], wanted: str, args: dict[str, Any]
) -> dict[str, Any] | None:
    """A call of tool ``wanted``: a function of its own, or (Codex's MCP tools) one inside a
    ``namespace`` tool, called by its name with the namespace beside it."""
    name = offered_tool(tools, wanted)
    if name is not None:
        return _oa_call(name, args)
    for namespace, tool in tools.items():
        inner = [t.get("name") for t in tool.get("tools") or [] if isinstance(t, dict)]
        if tool.get("type") == "namespace" and wanted in inner:
            return {**_oa_call(wanted, args), "namespace": namespace}
    return None


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
