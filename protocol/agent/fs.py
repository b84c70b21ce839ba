"""``fs/read_text_file`` and ``fs/write_text_file`` confined to a session's directories.

A path is allowed only if, after resolving every symlink and ``..``, it lies inside the
session cwd or one of its additional directories. The check is on the resolved path, so a
symlink inside the cwd that points outside is refused too. Refusals are JSON-RPC errors
(``-32602`` with ``data.reason``); nothing outside is ever opened, for reading or writing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from acp import RequestError

# The most an agent's fs/read_text_file may read, and fs/write_text_file write (16 MiB).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
_PIECE = 1024 * 1024


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

    def read_text(
        self,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> str:
        """The file's text (or ``limit`` lines from ``line``), at most ``max_bytes`` read.
        Only regular files: a FIFO, device or socket is refused, never opened in a way that
        could block (``O_NONBLOCK``, then ``fstat``)."""
        real = self.resolve(path)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RequestError.resource_not_found(str(path)) from None
        except IsADirectoryError:
            raise RequestError.invalid_params({"path": path, "reason": "is a directory"}) from None
        except OSError as exc:
            raise RequestError.invalid_params({"path": path, "reason": str(exc)}) from None
        with os.fdopen(fd, "rb") as raw:
            info = os.fstat(raw.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise RequestError.invalid_params({"path": path, "reason": "is a directory"})
            if not stat.S_ISREG(info.st_mode):
                raise RequestError.invalid_params(
                    {"path": path, "reason": "not a regular file (a FIFO, device or socket)"}
                )
            if line is None and limit is None:
                if info.st_size > max_bytes:
                    raise _too_large(path, info.st_size, max_bytes)
                data = raw.read(max_bytes + 1)
                if len(data) > max_bytes:  # it grew since fstat
                    raise _too_large(path, len(data), max_bytes)
                return data.decode("utf-8", errors="replace")
            return _slice_lines(raw, line or 1, limit, path, max_bytes)

    def write_text(self, path: str, content: str, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if len(content) > max_bytes or len(content.encode("utf-8")) > max_bytes:
            raise RequestError.invalid_params(
                {"path": path, "reason": f"content over the limit of {max_bytes} bytes"}
            )
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


def _slice_lines(raw: BinaryIO, line: int, limit: int | None, path: str, max_bytes: int) -> str:
    """``limit`` lines from line ``line`` (1-based). What is returned may not exceed
    ``max_bytes``; lines before ``line`` are skipped in pieces of at most ``_PIECE`` bytes, so
    even one huge line costs no more memory than that (and the caller's timeout bounds the
    time)."""
    if line < 1 or (limit is not None and limit < 0):
        raise RequestError.invalid_params({"reason": "line must be >= 1 and limit >= 0"})
    out = bytearray()
    taken, number = 0, 1
    while limit is None or taken < limit:
        piece = raw.readline(_PIECE)
        if not piece:
            break
        complete = piece.endswith(b"\n")
        if number >= line:
            out += piece
            if len(out) > max_bytes:
                raise _too_large(path, len(out), max_bytes, lines=True)
            taken += complete
        number += complete
    return out.decode("utf-8", errors="replace")


def _too_large(path: str, size: int, max_bytes: int, lines: bool = False) -> RequestError:
    what = "the lines asked for reach past" if lines else f"the file is {size} bytes, over"
    return RequestError.invalid_params(
        {
            "path": path,
            "reason": f"{what} the read limit of {max_bytes} bytes; read a range with "
            "line and limit (limits.fs_max_bytes)",
        }
    )
