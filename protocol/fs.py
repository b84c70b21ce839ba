"""``fs/read_text_file`` and ``fs/write_text_file`` confined to a session's directories.

A path is allowed only if, after resolving every symlink and ``..``, it lies inside the
session cwd or one of its additional directories. The check is on the resolved path, so a
symlink inside the cwd that points outside is refused too. Refusals are JSON-RPC errors
(``-32602`` with ``data.reason``); nothing outside is ever opened, for reading or writing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from acp import RequestError


class Confinement:
    def __init__(self, cwd: str, additional: Iterable[str] = ()) -> None:
        self.roots = tuple(Path(os.path.realpath(p)) for p in (cwd, *additional))
        self.cwd = self.roots[0]

    def resolve(self, path: str) -> Path:
        """The real path for ``path``, or a ``RequestError`` if it escapes every root."""
        if "\x00" in path:
            raise RequestError.invalid_params({"path": path, "reason": "NUL in path"})
        candidate = Path(path) if os.path.isabs(path) else self.cwd / path
        real = Path(os.path.realpath(candidate))
        if not any(real == root or real.is_relative_to(root) for root in self.roots):
            raise RequestError.invalid_params(
                {"path": path, "reason": "outside the session's directories"}
            )
        return real

    def read_text(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        real = self.resolve(path)
        try:
            with real.open(encoding="utf-8", errors="replace", newline="") as fh:
                if line is None and limit is None:
                    return fh.read()
                return _slice_lines(fh, line or 1, limit)
        except FileNotFoundError:
            raise RequestError.resource_not_found(str(path)) from None
        except IsADirectoryError:
            raise RequestError.invalid_params({"path": path, "reason": "is a directory"}) from None
        except PermissionError as exc:
            raise RequestError.invalid_params({"path": path, "reason": str(exc)}) from None

    def write_text(self, path: str, content: str) -> None:
        real = self.resolve(path)
        if not real.parent.is_dir():
            raise RequestError.invalid_params({"path": path, "reason": "directory does not exist"})
        tmp = real.with_name(f".{real.name}.acp-tmp-{os.getpid()}")
        try:
            # Write then rename: an agent's file is never left half-written by a crash.
            with open(tmp, "x", encoding="utf-8", newline="") as fh:
                fh.write(content)
            os.replace(tmp, real)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise RequestError.invalid_params({"path": path, "reason": str(exc)}) from None


def _slice_lines(fh: Iterable[str], line: int, limit: int | None) -> str:
    if line < 1 or (limit is not None and limit < 0):
        raise RequestError.invalid_params({"reason": "line must be >= 1 and limit >= 0"})
    out: list[str] = []
    for number, text in enumerate(fh, start=1):
        if number < line:
            continue
        if limit is not None and len(out) >= limit:
            break
        out.append(text)
    return "".join(out)
