"""Access tokens: a secret is shown once and stored as a digest only; the check finds the
token by its secret, refuses other shapes, and sees a revocation within its memory time;
logs never carry a secret."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from control_plane.tokens import TokenCheck, create_token, list_tokens, revoke_token
from protocol.secrets import Redactor
from state_machines import TokenNotFound
from store import Store, queries
from store.tokens import TokenAccess, TokenSessions, secret_digest


def test_only_the_digest_of_a_secret_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    with Store.open(db) as store:
        record, secret = create_token(store, "laptop", TokenAccess.WATCH, TokenSessions.OWN)
    assert secret.startswith("acpctl_") and len(secret) > 40
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("cp.db"))
    assert secret.encode() not in raw
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT * FROM api_tokens").fetchone()
    assert secret not in repr(row) and secret_digest(secret) in row
    assert (record.access, record.sessions) == (TokenAccess.WATCH, TokenSessions.OWN)


def test_the_check_finds_a_token_by_its_secret_and_sees_a_revocation(tmp_path: Path) -> None:
    with Store.open(tmp_path / "cp.db") as store:
        record, secret = create_token(store, "ci")
        check = TokenCheck(lambda d: store.read(lambda c: queries.token_by_digest(c, d)), 0.2)
        found = check(secret)
        assert found is not None and found.id == record.id
        assert check("acpctl_" + "x" * 43) is None
        assert check("not-even-the-shape") is None
        assert [t.id for t in revoke_token(store, "ci")] == [record.id]
        assert check(secret) is not None  # remembered for ttl_s
        time.sleep(0.25)
        assert check(secret) is None
        assert list_tokens(store)[0].revoked_at is not None
        with pytest.raises(TokenNotFound):
            revoke_token(store, "ci")  # nothing active by that name any more


def test_log_redaction_replaces_access_tokens_by_their_shape() -> None:
    secret = "acpctl_" + "Ab3_-" * 9
    redact = Redactor([]).redact
    assert redact(f"refused {secret} from 10.0.0.1") == "refused acpctl_*** from 10.0.0.1"
    assert redact("acpctl_serve is a word") == "acpctl_serve is a word"
