"""One archive per tree, written and verified before anything of the tree is deleted.

``DIR/<root>.tar.gz`` holds ``manifest.json`` first (format, store identity, when, the
tree's sessions with their parents, and each other member's SHA-256 and size), then per
session, parents first: ``<id>.transcript.jsonl`` (the JSONL v3 transcript, as ``acpctl
sessions export`` writes it), ``<id>.events.jsonl`` (the raw event log: one object per
event, ``payload`` the stored JSON document verbatim) and ``<id>.commands.jsonl``.
``DIR/<root>.tar.gz.sha256`` beside it is in ``sha256sum`` format (``sha256sum -c``).

Written atomically (a temporary file in DIR, fsync, rename, fsync of DIR), then read back
from disk: the file's digest, every member's digest against the manifest. An archive that
cannot be written or does not verify is removed, and its tree is not deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import IO, Any

from protocol.atomic_file import write_text_atomically
from state_machines import ControlPlaneError
from store import EventRecord, Store
from store.queries import retention as retention_queries
from store.queries.retention import TreeSession, TreeVerdict

FORMAT = "acpctl-gc-archive"
VERSION = 1
MANIFEST = "manifest.json"
_STAGING = ".acpctl-gc-"
_PAGE = 2000  # events read per reader transaction


class ArchiveError(ControlPlaneError):
    """An archive could not be written or did not verify; its tree was not deleted."""


class ArchiveStopped(ArchiveError):
    """The gc was asked to stop while it wrote an archive (its process is closing): the
    part written is removed, the tree is left as it was."""


@dataclass(frozen=True)
class ArchiveRef:
    path: Path
    sha256: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "sha256": self.sha256, "bytes": self.bytes}


def archive_path(directory: Path, root: str) -> Path:
    return directory / f"{root}.tar.gz"


def write_archive(
    store: Store, tree: TreeVerdict, directory: Path, stop: threading.Event | None = None
) -> ArchiveRef:
    """Write and verify the tree's archive in ``directory`` (``ArchiveError``); once
    ``stop`` is set, ``ArchiveStopped`` at the next page of events (a big tree takes
    minutes, and a process closing must not wait for it)."""
    target = archive_path(directory, tree.root)
    # Everything temporary lives in one directory named after this process, beside the
    # archive (the same file system: the renames out of it are atomic), so what a killed
    # gc left is found and removed by the next one.
    staging: Path | None = None
    try:
        staging = Path(tempfile.mkdtemp(dir=directory, prefix=f"{_STAGING}{os.getpid()}-"))
        members = [m for s in tree.sessions for m in _session_members(store, s, staging, stop)]
        manifest = _manifest(store, tree, staging, members)
        ref = _write_tar(target, manifest, staging, members)
        _write_checksum(target, ref.sha256)
        verify_archive(target)
        return ref
    except ArchiveStopped:
        remove_archive(target)
        raise
    except (OSError, tarfile.TarError, ValueError) as exc:
        remove_archive(target)
        raise ArchiveError(f"archive of tree {tree.root} in {directory}: {exc}") from exc
    except BaseException:
        remove_archive(target)
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def sweep_stale(directory: Path) -> None:
    """Remove the staging directories of gcs that are gone (killed while archiving)."""
    for entry in directory.glob(f"{_STAGING}*"):
        pid_text = entry.name[len(_STAGING) :].split("-", 1)[0]
        if entry.is_dir() and pid_text.isdigit() and not _pid_alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_archive(target: Path) -> None:
    """Remove an archive and its checksum file (one that failed, or that no longer
    describes a tree that is being deleted)."""
    for path in (target, _checksum_path(target)):
        # Not ours to remove when it fails (a directory in the way): the error says why.
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _checksum_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


# -- the members ---------------------------------------------------------------------


def _session_members(
    store: Store, session: TreeSession, staging: Path, stop: threading.Event | None
) -> list[str]:
    """Write the session's three members into ``staging``; their names."""
    from control_plane.export import transcript_session
    from protocol.transcript.mapping import write_transcript

    sid = session.id
    events_name, transcript_name = f"{sid}.events.jsonl", f"{sid}.transcript.jsonl"
    record = store.get_session(sid)
    with open(staging / events_name, "w", encoding="utf-8", newline="\n") as events_out:
        # One pass over the log: each page is written raw and fed to the transcript.
        records = _logged_events(store, session, events_out, stop)
        write_transcript(staging / transcript_name, transcript_session(record), records)
    commands_name = f"{sid}.commands.jsonl"
    rows = store.read(lambda c: retention_queries.archive_commands(c, sid))
    with open(staging / commands_name, "w", encoding="utf-8", newline="\n") as commands_out:
        for row in rows:
            commands_out.write(_command_line(row))
    return [transcript_name, events_name, commands_name]


def _logged_events(
    store: Store, session: TreeSession, out: IO[str], stop: threading.Event | None
) -> Iterator[EventRecord]:
    """The session's events up to the seq it was judged at, a page per read; each is
    written to ``out`` (the raw log) as it is yielded (to the transcript)."""
    after = 0
    while after < session.last_event_seq:
        if stop is not None and stop.is_set():
            raise ArchiveStopped(f"stopped while archiving session {session.id}")
        page = store.read(
            partial(
                retention_queries.archive_events,
                session_id=session.id,
                after_seq=after,
                upto_seq=session.last_event_seq,
                limit=_PAGE,
            )
        )
        if not page:
            return
        for event_id, seq, command_id, kind, payload, created in page:
            out.write(_event_line(event_id, seq, command_id, kind, payload, created))
            yield EventRecord(event_id, session.id, seq, command_id, kind, payload, created)
        after = page[-1][1]


def _event_line(
    event_id: int, seq: int, command_id: str | None, kind: str, payload: str, created: float
) -> str:
    # The payload is the stored JSON document itself, spliced in: byte for byte what the
    # agent sent. JSON allows a raw line break only as whitespace between tokens, so one
    # (never written by this store, whose payloads are single lines) becomes a space.
    document = payload.replace("\r", " ").replace("\n", " ")
    return (
        f'{{"id":{event_id},"seq":{seq},"command_id":{json.dumps(command_id)},'
        f'"kind":{json.dumps(kind)},"created_at":{json.dumps(created)},'
        f'"payload":{document}}}\n'
    )


def _command_line(row: dict[str, Any]) -> str:
    fields = dict(row)
    for name in ("payload", "result"):  # JSON documents stored as text
        if fields.get(name) is not None:
            fields[name] = json.loads(fields[name])
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":")) + "\n"


def _file_digest(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _manifest(store: Store, tree: TreeVerdict, staging: Path, members: list[str]) -> bytes:
    sessions = []
    for s in tree.sessions:
        row = store.read(partial(retention_queries.archive_session_row, session_id=s.id))
        if row is None:
            raise ValueError(f"session {s.id} is gone")
        sessions.append(
            {
                "id": s.id,
                "parentId": s.parent_id,
                "state": row["state"],
                "agent": json.loads(row["agent"]),
                "cwd": row["cwd"],
                "createdAt": row["created_at"],
                "updatedAt": row["updated_at"],
                "closedAt": row["closed_at"],
                "lastEventSeq": row["last_event_seq"],
                "lastCommandSeq": row["last_command_seq"],
                "lastError": row["last_error"],
                "metadata": json.loads(row["metadata"]),
            }
        )
    listed = []
    for name in members:
        digest, size = _file_digest(staging / name)
        listed.append({"name": name, "sha256": digest, "bytes": size})
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "store": {"id": store.identity, "backend": store.backend.value, "location": store.path},
        "createdAt": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "root": tree.root,
        "sessions": sessions,
        "members": listed,
    }
    return json.dumps(manifest, ensure_ascii=False, indent=2).encode() + b"\n"


# -- the file ------------------------------------------------------------------------


class _HashingWriter(io.RawIOBase):
    """A file that hashes what is written through it (the gzip stream, as it lands)."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__()
        self.stream = stream
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.size += len(view)
        self.stream.write(view)
        return len(view)


def _write_tar(target: Path, manifest: bytes, staging: Path, members: list[str]) -> ArchiveRef:
    temp_name = staging / f"{target.name}.tmp"
    handle = os.open(temp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(handle, "wb") as stream:
            hashing = _HashingWriter(stream)
            with tarfile.open(fileobj=hashing, mode="w:gz", compresslevel=6) as tar:
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mode, info.mtime = len(manifest), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(manifest))
                for name in members:
                    tar.add(staging / name, arcname=name, recursive=False, filter=_plain)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)
    return ArchiveRef(target, hashing.digest.hexdigest(), hashing.size)


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Members owned by nobody in particular: the archive travels."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o644
    return info


def _write_checksum(target: Path, digest: str) -> None:
    """``sha256sum``'s text format beside the archive, replaced atomically (mode 0600, as
    ``mkstemp`` makes it)."""
    write_text_atomically(_checksum_path(target), f"{digest}  {target.name}\n")
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """The renames themselves survive a crash once the directory is synced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def verify_archive(target: Path) -> dict[str, Any]:
    """Read the archive back from disk: its digest against its ``.sha256`` file, every
    member against the manifest, nothing missing or extra. Returns the manifest;
    ``ValueError`` on any mismatch."""
    recorded, _, name = _checksum_path(target).read_text(encoding="utf-8").strip().partition("  ")
    digest, _ = _file_digest(target)
    if name != target.name or digest != recorded:
        raise ValueError(f"{target.name}: digest {digest} does not match its .sha256 file")
    with tarfile.open(target, "r:gz") as tar:
        manifest_file = tar.extractfile(MANIFEST)
        if manifest_file is None:
            raise ValueError(f"{target.name}: no {MANIFEST}")
        manifest: dict[str, Any] = json.load(manifest_file)
        expected = {m["name"]: m["sha256"] for m in manifest["members"]}
        found: dict[str, str] = {}
        for member in tar:
            if member.name == MANIFEST:
                continue
            stream = tar.extractfile(member)
            if stream is None:
                raise ValueError(f"{target.name}: {member.name} is not a file")
            with contextlib.closing(stream):
                member_digest = hashlib.sha256()
                while chunk := stream.read(1 << 20):
                    member_digest.update(chunk)
            found[member.name] = member_digest.hexdigest()
    if found != expected:
        bad = sorted(set(found.items()) ^ set(expected.items()))
        raise ValueError(f"{target.name}: members do not match the manifest: {bad[:4]}")
    return manifest
