"""A store filled fast with synthetic sessions, for the benches that need a large one
(``bench/search_scale.py``: 100,000 sessions and 10,000,000 events). Rows as the runtime
would write them (a session, its two prompts' commands, each turn's ``prompt``, streamed
``session_update`` frames and ``turn_ended``, and the search documents the writer keeps),
inserted with ``executemany`` in large transactions instead of one commit per turn. Not for
production stores: nothing here goes through the state machines."""

from __future__ import annotations

import itertools
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from store.search_text import prompt_text, turn_text
from store.store import Store
from store.writer import WriteContext

_SESSION = (
    "INSERT INTO sessions (id, spawn_key, request_hash, parent_id, depth, agent, cwd, state, "
    "queue_mode, acp_session_id, owner, epoch, last_event_seq, last_command_seq, created_at, "
    "updated_at, closed_at, last_error, metadata, agent_process, placement) VALUES "
    "(?, NULL, 'synthetic', NULL, 0, ?, '/work/repo', ?, 'followup', NULL, NULL, 0, ?, 2, ?, "
    "?, ?, NULL, '{}', NULL, NULL)"
)
_COMMAND = (
    "INSERT INTO commands (id, session_id, seq, kind, payload, idempotency_key, request_hash, "
    "state, attempts, max_attempts, result, error, created_at, started_at, finished_at, "
    "updated_at, priority) VALUES (?, ?, ?, 'prompt', ?, NULL, 'synthetic', 'completed', 1, 3, "
    '\'{"stopReason":"end_turn"}\', NULL, ?, ?, ?, ?, 0)'
)
_EVENT = (
    "INSERT INTO events (session_id, seq, command_id, kind, payload, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_DOC = (
    "INSERT INTO search_docs (session_id, command_id, seq, role, created_at, body) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
TURNS_PER_SESSION = 2
STATES = ("closed", "idle", "error")


@dataclass(frozen=True)
class Vocabulary:
    """Made-up words ranked by a Zipf law: a few are in most documents, most in few.
    ``cumulative`` holds the running sums of the weights 1/rank (what ``choices`` draws by)."""

    words: tuple[str, ...]
    cumulative: tuple[float, ...]

    @classmethod
    def make(cls, size: int, rng: random.Random) -> Vocabulary:
        syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "do"]
        words: set[str] = set()
        while len(words) < size:
            words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
        ordered = sorted(words)
        rng.shuffle(ordered)
        weights = (1.0 / (rank + 1) for rank in range(size))
        return cls(tuple(ordered), tuple(itertools.accumulate(weights)))

    def text(self, rng: random.Random, n: int) -> str:
        return " ".join(rng.choices(self.words, cum_weights=self.cumulative, k=n))


def seed(
    store: Store,
    sessions: int,
    events_per_session: int,
    vocabulary: Vocabulary,
    rng: random.Random,
    progress: Callable[[int], None] | None = None,
    per_transaction: int = 500,
) -> None:
    """Add ``sessions`` sessions of ``events_per_session`` events each (at least 8)."""
    updates_per_turn = max(1, (events_per_session - 2) // TURNS_PER_SESSION - 2)
    agent = json.dumps({"name": "synthetic", "command": ["synthetic-agent"], "envNames": []})
    done = 0
    while done < sessions:
        batch = min(per_transaction, sessions - done)
        rows = _rows(batch, done, updates_per_turn, agent, vocabulary, rng)
        store.write(lambda ctx, r=rows: _insert(ctx, r))  # type: ignore[misc]
        done += batch
        if progress is not None:
            progress(done)


@dataclass
class _Rows:
    sessions: list[tuple[object, ...]]
    commands: list[tuple[object, ...]]
    events: list[tuple[object, ...]]
    docs: list[tuple[object, ...]]


def _rows(
    count: int, offset: int, updates: int, agent: str, vocab: Vocabulary, rng: random.Random
) -> _Rows:
    out = _Rows([], [], [], [])
    base = time.time() - 90 * 86400
    for i in range(count):
        sid = str(uuid.UUID(int=rng.getrandbits(128)))
        at = base + (offset + i) * 60.0  # one session a minute, oldest first
        last_seq = _session_rows(out, sid, at, updates, vocab, rng)
        state = rng.choice(STATES)
        closed = at + 2 if state == "closed" else None
        out.sessions.append((sid, agent, state, last_seq, at, at + 2, closed))
    return out


def _session_rows(
    out: _Rows, sid: str, at: float, updates: int, vocab: Vocabulary, rng: random.Random
) -> int:
    """One session's commands, events and documents into ``out``; its last event seq."""
    events: list[tuple[str, str, str | None]] = [
        ("session_created", '{"agent":{"name":"synthetic"},"cwd":"/work/repo"}', None),
        ("agent_started", '{"how":"new"}', None),
    ]
    for turn in range(TURNS_PER_SESSION):
        cid = str(uuid.UUID(int=rng.getrandbits(128)))
        content = [{"type": "text", "text": vocab.text(rng, 12)}]
        prompt = json.dumps({"commandId": cid, "content": content})
        out.commands.append(
            (cid, sid, turn + 1, json.dumps({"content": content}), at, at, at + 1, at + 1)
        )
        events.append(("prompt", prompt, cid))
        out.docs.append((sid, cid, len(events), "user", at, prompt_text(prompt)))
        frames = [_chunk(sid, vocab.text(rng, 8)) for _ in range(updates)]
        events += [("session_update", frame, cid) for frame in frames]
        events.append(("turn_ended", '{"stopReason":"end_turn"}', cid))
        out.docs.append((sid, cid, len(events), "agent", at + 1, turn_text(frames)))
    out.events += [
        (sid, seq, cid, kind, payload, at + seq * 0.01)
        for seq, (kind, payload, cid) in enumerate(events, start=1)
    ]
    return len(events)


def _chunk(sid: str, text: str) -> str:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    frame = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": sid, "update": update},
    }
    return json.dumps(frame, separators=(",", ":"))


def _insert(ctx: WriteContext, rows: _Rows) -> None:
    raw = ctx.raw
    raw.executemany(_SESSION, rows.sessions)
    raw.executemany(_COMMAND, rows.commands)
    raw.executemany(_EVENT, rows.events)
    raw.executemany(_DOC, rows.docs)


def analyze(store: Store) -> None:
    """Planner statistics after a bulk load, as autovacuum would gather them on PostgreSQL
    a minute later (SQLite's planner works without them, as a store in use does)."""
    if store.backend.value == "postgresql":
        store.write(lambda ctx: ctx.raw.execute("ANALYZE"))
