"""Access tokens: a secret is shown once and stored as a digest only; the check finds the
token by its secret, refuses other shapes, and sees a revocation within its memory time;
logs never carry a secret."""

from __future__ import annotations

import time

import pytest

from control_plane.tokens import TokenCheck, create_token, list_tokens, revoke_token
from protocol.secrets import Redactor
from state_machines import TokenNotFound
from store import Store, queries
from store.tokens import TokenAccess, TokenSessions, secret_digest
from tests.support.direct_sql import query
from tests.support.store_contents import stored_bytes

# The PostgreSQL variants stay in the default run: tokens are stored and
# looked up by each backend's SQL.
pytestmark = pytest.mark.backend_specific


def test_only_the_digest_of_a_secret_is_stored(db: str) -> None:
    with Store.open(db) as store:
        record, secret = create_token(store, "laptop", TokenAccess.WATCH, TokenSessions.OWN)
    assert secret.startswith("acpctl_") and len(secret) > 40
    assert secret.encode() not in stored_bytes(db)
    (row,) = query(db, "SELECT * FROM api_tokens")
    assert secret not in repr(row) and secret_digest(secret) in row
    assert (record.access, record.sessions) == (TokenAccess.WATCH, TokenSessions.OWN)


def test_the_check_finds_a_token_by_its_secret_and_sees_a_revocation(store: Store) -> None:
    record, secret = create_token(store, "ci")
    check = TokenCheck(lambda d: store.read(lambda c: queries.token_by_digest(c, d)), 3.0)
    found = check(secret)
    assert found is not None and found.id == record.id
    assert check("acpctl_" + "x" * 43) is None
    assert check("not-even-the-shape") is None
    assert [t.id for t in revoke_token(store, "ci")] == [record.id]
    assert check(secret) is not None  # remembered for ttl_s
    time.sleep(3.1)  # ttl long enough for a loaded CI machine between the checks
    assert check(secret) is None
    assert list_tokens(store)[0].revoked_at is not None
    with pytest.raises(TokenNotFound):
        revoke_token(store, "ci")  # nothing active by that name any more


def test_log_redaction_replaces_access_tokens_by_their_shape() -> None:
    secret = "acpctl_" + "Ab3_-" * 9
    redact = Redactor([]).redact
    assert redact(f"refused {secret} from 10.0.0.1") == "refused acpctl_*** from 10.0.0.1"
    assert redact("acpctl_serve is a word") == "acpctl_serve is a word"
