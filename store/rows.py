"""Row -> record conversion, shared by the sync and async read paths."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row

from state_machines import CommandState, SessionState
from store.placement import Placement
from store.records import (
    AgentSpec,
    BindingRecord,
    CommandKind,
    CommandRecord,
    EventRecord,
    SessionRecord,
    SinkKind,
    utc,
)


def _opt_utc(ts: float | None) -> Any:
    return None if ts is None else utc(ts)


def session_from_row(row: Row[Any]) -> SessionRecord:
    return session_from_mapping(row._mapping)


def session_from_mapping(m: Mapping[Any, Any]) -> SessionRecord:
    """A session's record from its column values (a row read, or the values a spawn just
    inserted: the same conversion either way)."""
    return SessionRecord(
        id=m["id"],
        spawn_key=m["spawn_key"],
        parent_id=m["parent_id"],
        depth=m["depth"],
        agent=AgentSpec.from_json(json.loads(m["agent"])),
        cwd=m["cwd"],
        state=SessionState(m["state"]),
        queue_mode=m["queue_mode"],
        acp_session_id=m["acp_session_id"],
        owner=m["owner"],
        epoch=m["epoch"],
        last_event_seq=m["last_event_seq"],
        created_at=utc(m["created_at"]),
        updated_at=utc(m["updated_at"]),
        closed_at=_opt_utc(m["closed_at"]),
        last_error=m["last_error"],
        metadata=json.loads(m["metadata"]),
        agent_process=json.loads(m["agent_process"]) if m["agent_process"] else None,
        placement=Placement.from_json(m["placement"]),
    )


def command_from_row(row: Row[Any]) -> CommandRecord:
    m = row._mapping
    return CommandRecord(
        id=m["id"],
        session_id=m["session_id"],
        seq=m["seq"],
        kind=CommandKind(m["kind"]),
        payload_json=m["payload"],
        idempotency_key=m["idempotency_key"],
        state=CommandState(m["state"]),
        attempts=m["attempts"],
        max_attempts=m["max_attempts"],
        result_json=m["result"],
        error=m["error"],
        created_ts=m["created_at"],
        started_ts=m["started_at"],
        finished_ts=m["finished_at"],
    )


def event_from_row(row: Row[Any]) -> EventRecord:
    m = row._mapping
    return EventRecord(
        id=m["id"],
        session_id=m["session_id"],
        seq=m["seq"],
        command_id=m["command_id"],
        kind=m["kind"],
        raw=m["payload"],
        created=m["created_at"],
    )


def binding_from_row(row: Row[Any]) -> BindingRecord:
    m = row._mapping
    return BindingRecord(
        id=m["id"],
        session_id=m["session_id"],
        sink_kind=SinkKind(m["sink_kind"]),
        target=m["target"],
        active=bool(m["active"]),
        last_delivered_seq=m["last_event_seq"] or 0,
        bound_at=utc(m["bound_at"]),
    )
