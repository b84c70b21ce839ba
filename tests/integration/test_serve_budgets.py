"""A budget in the configuration of ``acpctl serve``: the ACP client gets a clear error."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, text_block

from tests.integration.test_serve import Client, _run_client


def test_a_prompt_past_the_session_budget_is_refused_with_a_clear_error(
    tmp_path: Path, db: str
) -> None:
    client = Client()

    async def body(conn: Any, proc: Any, init: Any) -> None:
        sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        first = await conn.prompt(session_id=sid, prompt=[text_block("#chunks=20 hi")])
        assert first.stop_reason == "end_turn"  # 22 tokens: this turn reached the budget
        with pytest.raises(RequestError) as refused:
            await conn.prompt(session_id=sid, prompt=[text_block("more")])
        assert refused.value.code == -32600
        data = refused.value.data
        assert isinstance(data, dict)
        assert data["reason"] == "budget exceeded" and data["budget"] == "session tokens"
        assert (data["limit"], data["used"]) == (10, 22)
        other = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
        second = await conn.prompt(session_id=other, prompt=[text_block("#chunks=3 fine")])
        assert second.stop_reason == "end_turn"  # a new session has its own budget

    (tmp_path / "none.toml").write_text('[budgets.session]\ntokens = 10\naction = "stop"\n')
    with (tmp_path / "serve.log").open("ab") as log:
        asyncio.run(_run_client(tmp_path, db, client, body, log.fileno()))
