"""Quiet the SDK's log noise that the raw tap makes redundant.

The SDK validates each ``session/update`` into its models and logs an ERROR with a traceback
for kinds it does not know (vendor extensions, newer protocol versions). The raw tap has
already recorded those frames verbatim, so for us they are not errors: this filter drops
exactly those records and nothing else.
"""

from __future__ import annotations

import logging

_MARK = "Unhandled error while handling notification"


class _DropUnknownUpdateKinds(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (_MARK in message and "session/update" in message)


_installed = False


def install() -> None:
    global _installed
    if not _installed:
        root = logging.getLogger()
        root.addFilter(_DropUnknownUpdateKinds())
        for handler in root.handlers:
            handler.addFilter(_DropUnknownUpdateKinds())
        _installed = True
