"""Calling the subagent tools from a test as an agent (or an outsider) would: this process
made a root of a session's agent tree, and a raw MCP ``initialize`` POST to the control
plane's HTTP endpoint (its status and body, whatever the status)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from protocol.agent.proc_tree import process_start_time

ACCEPT = "application/json, text/event-stream"


def act_as(bridge: Any, session_id: str) -> None:
    """Make this process a root of the session's agent tree, so the kernel's answer about
    who calls (``control_plane/subagents/peers.py``) makes it that session's agent."""
    start = process_start_time(os.getpid())
    assert start is not None
    bridge.trees.bind(session_id, os.getpid(), start)


def post_initialize(url: str, client: str = "test") -> tuple[int, bytes]:
    """POST an MCP ``initialize`` to ``url``: the HTTP status and the body."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": client, "version": "0"},
        },
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        headers={"content-type": "application/json", "accept": ACCEPT},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as refused:
        return int(refused.code), refused.read()
