from __future__ import annotations

import importlib
import json
import pkgutil
import threading
from pathlib import Path

import pytest

import control_plane
from control_plane import (
    CommandState,
    ControlPlane,
    IdempotencyConflict,
    SessionClosed,
    SessionNotFound,
    SessionState,
)
from protocol.transcript.reader import validate_v3
from store import NewEvent
from store.location import locate

PINNED_ALL = [
    "AgentCommandError",
    "AgentExited",
    "AgentNotInstalled",
    "AgentProtocolError",
    "AgentSpec",
    "AgentStartFailed",
    "AsyncControlPlane",
    "BindingRecord",
    "Budget",
    "BudgetAction",
    "BudgetExceeded",
    "CheckpointError",
    "CommandKind",
    "CommandNotFound",
    "CommandRecord",
    "CommandState",
    "ControlPlane",
    "ControlPlaneError",
    "Decision",
    "EventKind",
    "EventRecord",
    "IdempotencyConflict",
    "IllegalTransition",
    "ImportOutcome",
    "IntegrityCheck",
    "InvalidPlacement",
    "LimitExceeded",
    "Outcome",
    "OutcomeStatus",
    "OwnedElsewhere",
    "PermissionPolicy",
    "Placement",
    "QueueMode",
    "RecoveryReport",
    "RuntimeSettings",
    "SchemaTooNew",
    "SearchFilters",
    "SearchHit",
    "SearchQueryError",
    "SessionClosed",
    "SessionNotFound",
    "SessionRecord",
    "SessionState",
    "SpawnResult",
    "StaleEpoch",
    "StoreDamaged",
    "StoreError",
    "StoreOptions",
    "StoreUnavailable",
    "Synchronous",
    "TranscriptFormatError",
    "UnknownAgent",
]


def test_public_all_is_pinned() -> None:
    assert control_plane.__all__ == PINNED_ALL
    assert set(PINNED_ALL) <= set(dir(control_plane))  # resolved lazily, listed all the same
    for name in PINNED_ALL:
        assert getattr(control_plane, name) is not None
    with pytest.raises(AttributeError):
        _ = control_plane.NoSuchName  # type: ignore[attr-defined]


# What a ControlPlane offers: the host API, then the narrow front-end services
# (control_plane/services.py). The store, actors, loop and delivery are not on this list.
PINNED_CONTROL_PLANE = [
    *("bind_jsonl", "cancel", "children", "close", "close_session", "command", "commands"),
    *("events", "export_jsonl", "follow", "fork", "get", "list_sessions", "open", "prompt"),
    *("import_transcript",),
    *("recovery", "register_callback", "resolve_agent", "result", "set_config_option"),
    *("set_mode", "spawn"),
    *("submit_prompt", "wait", "wait_delivered"),
    *("agent_capabilities", "command_events", "descendants", "events_of_kinds"),
    *("latest_event", "live_sessions", "watch_command", "search", "sessions_page"),
    *("record_agent_capabilities", "run_on_loop", "session_by_key", "session_for_acp"),
    *("start_agent_on_loop", "expect_http_tools", "expect_http_tools_for"),
    *(
        "settings",
        "nodes",
        "store_fault",
        "store_location",
        "store_path",
        "watch_session",
        "usage",
        "budget_stop",
    ),
    "apply_budget",
    "levels",
    "token_by_digest",
    "open_permission_request",
    "decide_permission",
    "withdraw_permission",
    "permission_request",
    "permission_requests",
    "pending_permissions",
    "permission_params",
]

# What the store package offers the layers above it: records, the Store and its options.
# Write contexts and fault injection are reached through their own modules only.
PINNED_STORE_ALL = [
    *("AgentSpec", "AsyncReader", "BindingRecord", "BindingSpec", "CommandKind"),
    *("CommandRecord", "CommittedEvent", "EnqueueResult", "EventRecord", "IntegrityCheck"),
    *("NewEvent", "RecoveryReport", "SessionCommit", "SessionRecord", "SessionWatch", "SinkKind"),
    *("SpawnResult", "Store", "StoreOptions", "SubagentLimits", "Synchronous"),
]


def test_control_plane_keeps_the_store_and_the_actors_private(tmp_path: Path, db: str) -> None:
    public = sorted(name for name in dir(ControlPlane) if not name.startswith("_"))
    assert public == sorted(PINNED_CONTROL_PLANE)
    with ControlPlane.open(db, run_sessions=False) as cp:
        for machinery in ("store", "delivery", "loop", "supervisor"):
            assert not hasattr(cp, machinery)
        assert cp.store_path == locate(db).display


def test_store_offers_no_write_context_or_fault_injection() -> None:
    import store

    assert sorted(store.__all__) == sorted(PINNED_STORE_ALL)
    for internal in ("WriteContext", "InjectedFault"):
        assert internal not in store.__all__
        assert not hasattr(store, internal)


def test_every_error_is_a_control_plane_error() -> None:
    for name in PINNED_ALL:
        obj = getattr(control_plane, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, control_plane.ControlPlaneError)


# Raised on purpose to stand in for a crash at a named fault point: it must not be caught as
# a control-plane error anywhere, or a crash test would test an error path instead.
NOT_IN_THE_TREE = {"store.faults.InjectedFault"}


def _product_modules() -> list[str]:
    names = []
    for package in ("control_plane", "actors", "store", "protocol", "state_machines"):
        root = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            # __main__ modules run on import; migrations run Alembic's env on import
            if info.name.endswith("__main__") or info.name.startswith("store.migrations"):
                continue
            names.append(info.name)
    return names


def test_every_exception_class_defined_anywhere_is_in_the_tree() -> None:
    defined = []
    for module_name in _product_modules():
        module = importlib.import_module(module_name)
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == module_name
            ):
                defined.append(obj)
    assert len(defined) > 20  # the walk found the tree's own classes, and the others
    outside = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in defined
        if not issubclass(cls, control_plane.ControlPlaneError)
    }
    assert outside == NOT_IN_THE_TREE


def test_spawn_prompt_list_and_close_through_the_api(tmp_path: Path, db: str) -> None:
    with ControlPlane.open(db, run_sessions=False) as cp:
        spawned = cp.spawn(
            "python -m protocol.example_agent", tmp_path, "hello", idempotency_key="s"
        )
        sid = spawned.session.id
        assert spawned.session.agent.name == "example-agent"
        assert (
            cp.spawn(
                "python -m protocol.example_agent", tmp_path, "hello", idempotency_key="s"
            ).session.id
            == sid
        )
        with pytest.raises(IdempotencyConflict):
            cp.spawn("python -m protocol.example_agent", tmp_path, "other", idempotency_key="s")
        cmd = cp.prompt(sid, "second", idempotency_key="p2")
        assert cp.prompt(sid, "second", idempotency_key="p2").id == cmd.id
        assert [c.seq for c in cp.commands(sid)] == [1, 2]
        assert [s.id for s in cp.list_sessions()] == [sid]
        assert cp.get(sid).state is SessionState.CREATING
        cp.close_session(sid)
        assert {c.state for c in cp.commands(sid)} == {CommandState.CANCELLED}
        with pytest.raises(SessionClosed):
            cp.prompt(sid, "too late")
        with pytest.raises(SessionNotFound):
            cp.get("missing")


# Paging is each backend's SQL: both stay in the default run.
@pytest.mark.backend_specific
def test_list_sessions_pages_with_a_cursor(tmp_path: Path, db: str) -> None:
    with ControlPlane.open(db, run_sessions=False) as cp:
        ids = [cp.spawn(["agent"], tmp_path, idempotency_key=f"k{i}").session.id for i in range(7)]
        pages: list[str] = []
        after = None
        while True:
            page = cp.list_sessions(limit=3, after_id=after)
            if not page:
                break
            pages.extend(s.id for s in page)
            after = page[-1].id
        assert pages == ids


def test_jsonl_sink_binding_receives_events_through_the_api(tmp_path: Path, db: str) -> None:
    sink = tmp_path / "sink.jsonl"
    with ControlPlane.open(db, run_sessions=False) as cp:
        sid = cp.spawn(["agent"], tmp_path, "hi", jsonl_sink=sink).session.id
        cp._store.append_events(sid, None, [NewEvent("tick", {})])
        assert cp.wait_delivered(10)
    kinds = [json.loads(line)["kind"] for line in sink.read_text().splitlines()]
    assert kinds == ["session_created", "tick"]


def test_callback_registered_after_open_gets_the_backlog(tmp_path: Path, db: str) -> None:
    got: list[int] = []
    done = threading.Event()
    with ControlPlane.open(db, run_sessions=False) as cp:
        sid = cp.spawn(["agent"], tmp_path, callback_sink="host").session.id
        cp._store.append_events(sid, None, [NewEvent("tick", {})])

        def on_event(event: control_plane.EventRecord) -> None:
            got.append(event.seq)
            if event.seq == 2:
                done.set()

        cp.register_callback("host", on_event)
        assert done.wait(10)
    assert got == [1, 2]


def test_export_jsonl_writes_a_valid_v3_transcript(tmp_path: Path, db: str) -> None:
    with ControlPlane.open(db, run_sessions=False) as cp:
        sid = cp.spawn(["my-agent"], tmp_path, "list files").session.id
        cmd = cp._store.claim_next(sid)
        assert cmd is not None
        raw = json.dumps(
            {
                "sessionId": "acp-1",
                "update": {
                    "sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": "Done."},
                },
            }
        )
        cp._store.append_events(
            sid,
            cmd.id,
            [
                NewEvent("prompt", {"commandId": cmd.id, "content": cmd.payload["content"]}),
                NewEvent("session_update", raw),
                NewEvent("turn_ended", {"commandId": cmd.id, "stopReason": "end_turn"}),
            ],
        )
        out = cp.export_jsonl(sid, tmp_path / "t.jsonl")
    transcript = validate_v3(out)
    assert transcript.header["id"] == sid
    messages = [e["message"] for e in transcript.entries if e["type"] == "message"]
    assert messages[0] == {**messages[0], "role": "user", "content": "list files"}
    assert messages[1]["content"] == [{"type": "text", "text": "Done."}]
    assert messages[1]["stopReason"] == "stop"
    assert messages[1]["provider"] == "my-agent"


def test_context_manager_closes_the_store(tmp_path: Path, db: str) -> None:
    cp = ControlPlane.open(db, run_sessions=False)
    with cp:
        pass
    with pytest.raises(control_plane.StoreError):
        cp.spawn(["agent"], tmp_path)
