"""Replacing secret values (an agent's configured keys) by ``***`` in text that is kept: log
lines and the stored tail of an agent's stderr. One rule for both: longest first, so a
secret that contains another is replaced whole; values under 6 characters ("1", "on") are
not secrets worth mangling every line for. Access tokens of ``serve --listen`` are replaced
by their shape (``acpctl_***``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

MIN_SECRET_CHARS = 6
# serve --listen's access tokens (control_plane/tokens.py): recognised by their shape, since
# the server never holds the list of them.
ACCESS_TOKEN = re.compile(r"acpctl_[A-Za-z0-9_-]{20,}")


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        found = {s for s in secrets if len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return True  # access tokens are looked for even with no configured secret

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        if "acpctl_" in text:
            text = ACCESS_TOKEN.sub("acpctl_***", text)
        return text
