"""Replacing secret values (an agent's configured keys) by ``***`` in text that is kept: log
lines and the stored tail of an agent's stderr. One rule for both: longest first, so a
secret that contains another is replaced whole; values under 6 characters ("1", "on") are
not secrets worth mangling every line for."""

from __future__ import annotations

from collections.abc import Iterable

MIN_SECRET_CHARS = 6


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        found = {s for s in secrets if len(s) >= MIN_SECRET_CHARS}
        self._secrets = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text
