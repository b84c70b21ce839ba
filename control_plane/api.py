"""``ControlPlane``: the synchronous public API over one store.

Thread-safe: any thread may call any method. Writes return once durable (group commit);
events reach bindings through the delivery service, resumed from their checkpoints on open.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.delivery import DeliveryService
from control_plane.agents import agent_from_command
from control_plane.content import PromptInput, prompt_blocks
from protocol.transcript import TranscriptSession, write_transcript
from state_machines import SessionState
from store import (
    AgentSpec,
    BindingRecord,
    BindingSpec,
    CommandKind,
    CommandRecord,
    EventRecord,
    RecoveryReport,
    SessionRecord,
    SinkKind,
    SpawnResult,
    Store,
    StoreOptions,
)

AgentInput = AgentSpec | str | list[str] | tuple[str, ...]


class ControlPlane:
    """Open with ``ControlPlane.open(path)``; use as a context manager to close cleanly."""

    def __init__(self, store: Store, delivery: DeliveryService, recovery: RecoveryReport) -> None:
        self.store = store
        self.delivery = delivery
        self.recovery = recovery

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        options: StoreOptions | None = None,
        delivery_workers: int = 4,
        delivery_batch: int = 256,
    ) -> ControlPlane:
        """Open (or create) the store at ``path``, run recovery, resume deliveries."""
        store = Store.open(path, options)
        try:
            recovery = store.recover()
            delivery = DeliveryService(store, workers=delivery_workers, batch_size=delivery_batch)
            delivery.start()
        except BaseException:
            store.close()
            raise
        return cls(store, delivery, recovery)

    def close(self) -> None:
        self.delivery.close()
        self.store.close()

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------------------

    def spawn(
        self,
        agent: AgentInput,
        cwd: str | os.PathLike[str] | None = None,
        prompt: PromptInput | None = None,
        *,
        jsonl_sink: str | os.PathLike[str] | None = None,
        callback_sink: str | None = None,
        idempotency_key: str | None = None,
        queue_mode: str = "followup",
        metadata: dict[str, Any] | None = None,
    ) -> SpawnResult:
        """Create a session, its binding and its first prompt in one transaction.

        The same ``idempotency_key`` with the same arguments returns the first spawn; with
        other arguments it raises ``IdempotencyConflict``.
        """
        spec = agent if isinstance(agent, AgentSpec) else agent_from_command(agent)
        binding: BindingSpec | None = None
        if jsonl_sink is not None and callback_sink is not None:
            raise ValueError("give at most one of jsonl_sink and callback_sink")
        if jsonl_sink is not None:
            binding = BindingSpec(SinkKind.JSONL, os.path.abspath(os.fspath(jsonl_sink)))
        elif callback_sink is not None:
            binding = BindingSpec(SinkKind.CALLBACK, callback_sink)
        return self.store.spawn(
            spec,
            os.path.abspath(os.fspath(cwd if cwd is not None else os.getcwd())),
            binding,
            None if prompt is None else prompt_blocks(prompt),
            idempotency_key,
            metadata=metadata,
            queue_mode=queue_mode,
        )

    def prompt(
        self, session_id: str, prompt: PromptInput, *, idempotency_key: str | None = None
    ) -> CommandRecord:
        """Queue a prompt; returns the command (the original one for a repeated key)."""
        payload = {"content": prompt_blocks(prompt)}
        return self.store.enqueue(session_id, CommandKind.PROMPT, payload, idempotency_key).command

    def cancel(self, session_id: str, *, include_queued: bool = False) -> SessionState:
        return self.store.cancel(session_id, include_queued)

    def close_session(self, session_id: str, reason: str = "closed") -> SessionRecord:
        return self.store.close_session(session_id, reason)

    def get(self, session_id: str) -> SessionRecord:
        return self.store.get_session(session_id)

    def command(self, command_id: str) -> CommandRecord:
        return self.store.get_command(command_id)

    def commands(self, session_id: str) -> list[CommandRecord]:
        return self.store.commands_of(session_id)

    def list_sessions(
        self, state: SessionState | None = None, limit: int = 100, after_id: str | None = None
    ) -> list[SessionRecord]:
        return self.store.list_sessions(state=state, limit=limit, after_id=after_id)

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> list[EventRecord]:
        return self.store.events(session_id, after_seq, limit)

    # -- delivery ------------------------------------------------------------------------

    def bind_jsonl(self, session_id: str, path: str | os.PathLike[str]) -> BindingRecord:
        spec = BindingSpec(SinkKind.JSONL, os.path.abspath(os.fspath(path)))
        binding = self.store.bind(session_id, spec)
        self.delivery.start()
        return binding

    def register_callback(self, name: str, fn: Callable[[EventRecord], None]) -> None:
        self.delivery.register_callback(name, fn)

    def wait_delivered(self, timeout: float = 10.0) -> bool:
        return self.delivery.wait_idle(timeout)

    # -- export --------------------------------------------------------------------------

    def export_jsonl(self, session_id: str, path: str | os.PathLike[str]) -> Path:
        """Write the session as a JSONL transcript v3 file (atomically); returns the path."""
        session = self.store.get_session(session_id)
        events = self.store.events(session_id)
        target = Path(path)
        write_transcript(target, transcript_session(session), events)
        return target


def transcript_session(session: SessionRecord) -> TranscriptSession:
    return TranscriptSession(
        id=session.id,
        cwd=session.cwd,
        created_at=session.created_at,
        agent_name=session.agent.name,
        parent_session=session.parent_id,
    )
