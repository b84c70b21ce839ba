"""The stand-in model server on its own (no agent needed)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from .model_server import ModelServer, parse_directive


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.read()


def _sse_data(raw: bytes) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in raw.decode().splitlines()
        if line.startswith("data: ")
    ]


def test_parse_directive() -> None:
    assert parse_directive("SAY hi there").text == "hi there"
    d = parse_directive("<system-reminder>x</system-reminder>\nRUN echo a >> b")
    assert (d.kind, d.command) == ("run", "echo a >> b")
    w = parse_directive("WRITE out/a.txt some text")
    assert (w.kind, w.path, w.text) == ("write", "out/a.txt", "some text")
    assert parse_directive("hello").kind == "default"


def test_only_loopback() -> None:
    with pytest.raises(ValueError):
        ModelServer(host="0.0.0.0")


def test_anthropic_stream_and_tool_round_trip(model_server: ModelServer) -> None:
    url = model_server.base_url + "/v1/messages"
    tools = [{"name": "Bash", "input_schema": {}}]
    _, raw = _post(url, {"stream": True, "messages": [{"role": "user", "content": "SAY hey you"}]})
    deltas = [e["delta"]["text"] for e in _sse_data(raw) if e["type"] == "content_block_delta"]
    assert len(deltas) >= 2 and "".join(deltas) == "hey you"
    msgs = [{"role": "user", "content": [{"type": "text", "text": "RUN echo x"}]}]
    _, raw = _post(url, {"stream": False, "tools": tools, "messages": msgs})
    block = json.loads(raw)["content"][0]
    assert block["type"] == "tool_use" and block["input"]["command"] == "echo x"
    msgs += [
        {"role": "assistant", "content": [block]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
    ]
    _, raw = _post(url, {"stream": False, "tools": tools, "messages": msgs})
    assert json.loads(raw)["content"][0]["text"] == "done: x"
    assert [r.path for r in model_server.requests] == ["/v1/messages"] * 3


def test_openai_responses_stream(model_server: ModelServer) -> None:
    url = model_server.base_url + "/v1/responses"
    tools = [{"type": "function", "name": "exec_command"}]
    item: dict[str, Any] = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": ""}],
    }
    item["content"][0]["text"] = "RUN ls"
    _, raw = _post(url, {"stream": True, "tools": tools, "input": [item]})
    events = _sse_data(raw)
    assert events[-1]["type"] == "response.completed"
    call = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "ls"}
    out = {"type": "function_call_output", "call_id": call["call_id"], "output": "Output:\na\n"}
    _, raw = _post(url, {"stream": True, "tools": tools, "input": [item, call, out]})
    text = "".join(e["delta"] for e in _sse_data(raw) if e["type"] == "response.output_text.delta")
    assert text == "done: a"


def test_gemini_stream(model_server: ModelServer) -> None:
    url = model_server.base_url + "/v1beta/models/m:streamGenerateContent?alt=sse"
    body = {"contents": [{"role": "user", "parts": [{"text": "SAY good day"}]}]}
    _, raw = _post(url, body)
    frames = _sse_data(raw)
    text = "".join(p["text"] for f in frames for p in f["candidates"][0]["content"]["parts"])
    assert text == "good day" and frames[-1]["candidates"][0]["finishReason"] == "STOP"
    assert model_server.requests[0].query == {"alt": ["sse"]}


def test_proxy_requests_are_refused(model_server: ModelServer) -> None:
    proxy = urllib.request.ProxyHandler({"http": model_server.base_url})
    opener = urllib.request.build_opener(proxy)
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open("http://example.invalid/x", timeout=10)
    assert err.value.code == 403
    assert model_server.blocked[0]["target"] == "http://example.invalid/x"
    assert model_server.requests == []
