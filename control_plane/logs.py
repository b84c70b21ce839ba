"""Logging for ``acpctl``: plain text (the default) or JSON, one object per line, on stderr.

JSON lines carry ``ts`` (UTC, ms), ``level``, ``logger``, ``message``, ``node`` (this
process's owner id, host:pid:start), ``session`` and ``command`` (from the session actor's
thread, ``actors/log_context.py``, or a record's ``extra``), ``trace_id`` / ``span_id`` when
an OpenTelemetry span is current, and ``exc`` for an exception.

Secrets are never logged: every line, in either format, has the values of the configured
agents' ``env`` and of the host variables they pass through replaced by ``***``, whatever
logged them (an agent's error message quoting its own environment, say)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from actors import log_context
from protocol.secrets import Redactor

if TYPE_CHECKING:
    from control_plane.config import Config

_HANDLER_NAME = "acpctl"


class SecretRedactor(logging.Filter):
    """Replaces each secret value in a record's message with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._redactor = Redactor(secrets)  # the rule stored stderr tails follow too
        self.redact = self._redactor.redact

    def filter(self, record: logging.LogRecord) -> bool:
        if self._redactor:
            record.msg = self.redact(record.getMessage())
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:
                record.exc_text = self.redact(record.exc_text)
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self, node: str) -> None:
        super().__init__()
        self._node = node

    def format(self, record: logging.LogRecord) -> str:
        session, command = log_context.current()
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "node": self._node,
            "session": getattr(record, "session", None) or session,
            "command": getattr(record, "command", None) or command,
            "thread": record.threadName,
        }
        trace = _current_trace()
        if trace is not None:
            line["trace_id"], line["span_id"] = trace
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps({k: v for k, v in line.items() if v is not None}, ensure_ascii=False)


def _current_trace() -> tuple[str, str] | None:
    """The current OpenTelemetry span's ids (hex), when the API is installed and a span is
    recording; None otherwise (tracing is an optional extra)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def secrets_of(config: Config) -> list[str]:
    """The values that must never reach a log line: configured agent env values, and the
    host's values of the variables agents pass through."""
    values: list[str] = []
    for agent in config.agents.values():
        values += agent.env.values()
        values += [os.environ[name] for name in agent.passthrough if name in os.environ]
    return values


def configure_logging(config: Config, level: int = logging.WARNING) -> None:
    """(Re)install acpctl's one stderr handler on the root logger, in the configured format."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(SecretRedactor(secrets_of(config)))
    if config.log_format == "json":
        from store.ownership import this_owner  # the store only when asked: fast --help

        handler.setFormatter(JsonFormatter(this_owner()))
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
