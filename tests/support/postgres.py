"""A throwaway PostgreSQL server for tests, started from the machine's server binaries.

Each ``PostgresServer`` runs its own postmaster on a free loopback port out of a fresh
``/tmp/acpctl-pg-*`` directory, so tests need no running service and leave nothing behind.
The tests run as root, and ``initdb``/``postgres`` refuse to run as root: under root both run
as ``nobody``. The directory is under ``/tmp`` rather than pytest's ``tmp_path`` because
``/tmp/pytest-of-root`` is 0700, which ``nobody`` cannot traverse.

A test process killed with ``kill -9`` cannot take its postmaster with it (postgres has no
parent-death option), so every directory records its owner's pid (``owner.pid``) and its
postmaster's (``postmaster.pid``); each ``start()`` reaps the directories of dead owners.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

from tests.support.postgres_machine import (
    MISSING_REASON,
    PREFIX,
    STOP_TIMEOUT_S,
    find_server_binaries,
    has_binaries,
    reap_stale,
    tmp_root,
)

__all__ = ["MISSING_REASON", "PostgresServer", "find_server_binaries"]

_RUN_AS = "nobody"
_READY_TIMEOUT_S = 30.0
_NAME_RE = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# The messages of a postmaster that lost the race for its port to another process.
_BIND_FAILURES = ("could not bind", "could not create any TCP/IP sockets")
_PORT_ATTEMPTS = 5


def _free_port() -> int:
    # The port is free now; another process may take it before the postmaster binds it,
    # which start() notices in the log and answers with another port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _database_name(name_or_url: str) -> str:
    if "://" in name_or_url:
        return urlsplit(name_or_url).path.lstrip("/")
    return name_or_url


class PostgresServer:
    """One postmaster of its own, in a temporary directory; ``stop()`` removes every trace.

    ``with PostgresServer(bin_dir) as pg: url = pg.create_database()`` is the whole use.
    Connections are by TCP on 127.0.0.1 as the superuser ``postgres``, with trust auth.
    """

    def __init__(self, bin_dir: Path, fsync: bool = False) -> None:
        self.bin_dir = Path(bin_dir)
        # Off for tests: they need no power-loss durability (they kill the control plane,
        # never this server), and copies of the template are fast. On for benchmarks.
        self.fsync = fsync
        self.tmp: Path | None = None
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        # The process that started the server is the only one that may stop it: a forked
        # child running its atexit hooks must not take the parent's server down.
        self._owner_pid = os.getpid()
        self._stopped = False

    # -- start -------------------------------------------------------------------------

    def _run_as(self) -> dict[str, Any]:
        """Popen keywords that drop root for postgres, which refuses to run as root; a
        non-root developer runs it as themself."""
        if os.geteuid() != 0:
            return {}
        entry = pwd.getpwnam(_RUN_AS)
        # extra_groups=[] also drops root's supplementary groups.
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _env(self) -> dict[str, str]:
        # The test process's PG* variables (PGDATA, PGPORT, PGHOST...) must not steer initdb
        # or the postmaster; the C locale keeps the log's messages in English for start()
        # to read.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        return env

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(_RUN_AS)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _log_size(self) -> int:
        try:
            return (self.tmp / "log").stat().st_size if self.tmp is not None else 0
        except OSError:
            return 0

    def _log_tail(self, lines: int = 40, since: int = 0) -> str:
        """The log's last lines, of what was written after byte SINCE."""
        if self.tmp is None:
            return ""
        try:
            with open(self.tmp / "log", "rb") as fh:
                fh.seek(since)
                text = fh.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> None:
        """initdb a fresh cluster and start its postmaster; returns once it takes
        connections. Raises RuntimeError (with the log's tail) where it does not in 30 s."""
        if self.tmp is not None:
            raise RuntimeError("PostgresServer.start() called twice")
        if not has_binaries(self.bin_dir):
            raise RuntimeError(f"{MISSING_REASON} (looked in {self.bin_dir})")
        self._owner_pid = os.getpid()
        # Register first: a failure anywhere below still removes the directory at exit.
        atexit.register(self._stop_at_exit)
        self.tmp = Path(tempfile.mkdtemp(prefix=PREFIX, dir=tmp_root()))
        (self.tmp / "owner.pid").write_text(f"{os.getpid()}\n")
        reap_stale(self.tmp.parent, keep=self.tmp)
        try:
            self._initdb()
            self._start_postmaster()
        except BaseException:
            self.stop()
            raise

    def _initdb(self) -> None:
        assert self.tmp is not None
        # 0755: nobody must get through to data/ and sock/; mkdtemp made it 0700.
        os.chmod(self.tmp, 0o755)
        self._chown(self.tmp)
        sock = self.tmp / "sock"
        sock.mkdir(mode=0o700)
        self._chown(sock)
        result = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.tmp / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                # The cluster is thrown away with the directory; syncing it costs seconds.
                "--no-sync",
            ],
            # nobody cannot enter the test process's working directory (/root, the checkout).
            cwd=self.tmp,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
            **self._run_as(),
        )
        if result.returncode != 0:
            output = result.stdout.decode(errors="replace")
            raise RuntimeError(f"initdb failed (exit {result.returncode}):\n{output}")

    def _start_postmaster(self) -> None:
        assert self.tmp is not None
        for _ in range(_PORT_ATTEMPTS):
            port = _free_port()
            # Only this attempt's lines tell whether it lost its port.
            since = self._log_size()
            self._spawn(port)
            outcome = self._wait_ready(port)
            if outcome == "ready":
                self._port = port
                return
            attempt_log = self._log_tail(since=since)
            if outcome == "exited" and any(msg in attempt_log for msg in _BIND_FAILURES):
                continue
            self._terminate()
            # The log goes with the directory: its tail goes into the error.
            raise RuntimeError(
                f"PostgreSQL did not start on port {port} ({outcome}); its log:\n{attempt_log}"
            )
        raise RuntimeError(
            f"PostgreSQL found no free port in {_PORT_ATTEMPTS} tries:\n{self._log_tail()}"
        )

    def _spawn(self, port: int) -> None:
        assert self.tmp is not None
        with open(self.tmp / "log", "ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self.tmp / "data"),
                    "-k",
                    str(self.tmp / "sock"),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-p",
                    str(port),
                    "-c",
                    "max_connections=300",
                    "-c",
                    f"fsync={'on' if self.fsync else 'off'}",
                    "-c",
                    "shared_buffers=32MB",
                    "-c",
                    "log_min_messages=warning",
                ],
                cwd=self.tmp,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Its own session: a Ctrl-C at the terminal reaches pytest, which stops the
                # server in order, not the postmaster behind its back.
                start_new_session=True,
                **self._run_as(),
            )
        # Written before the postmaster writes data/postmaster.pid, so the reaper of a
        # later run finds it even if this process dies during the startup.
        (self.tmp / "postmaster.pid").write_text(f"{self._proc.pid}\n")

    def _wait_ready(self, port: int) -> str:
        """'ready' once a connection succeeds, 'exited' if the postmaster died, 'timeout'.

        It polls the Unix socket in our own sock/ directory, where only our postmaster can
        answer: over TCP a process that took the port first could hold the poll up for the
        whole connect timeout. The postmaster binds TCP before it makes the socket (and
        exits if the bind fails), so an answer there means the port is ours too.
        """
        assert self._proc is not None and self.tmp is not None
        sock = str(self.tmp / "sock")
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return "exited"
            try:
                with psycopg.connect(
                    host=sock, port=port, user="postgres", dbname="postgres", connect_timeout=2
                ) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                # No socket yet, or "the database system is starting up".
                time.sleep(0.02)
        else:
            return "timeout"
        # Once over TCP, the way every caller connects.
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return "ready"

    # -- use ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("PostgresServer is not running")
        return self._port

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def admin_url(self) -> str:
        return self.url("postgres")

    def _admin(self, action: Callable[[psycopg.Connection[Any]], None]) -> None:
        # CREATE/DROP DATABASE cannot run inside a transaction block: autocommit.
        with psycopg.connect(self.admin_url(), autocommit=True, connect_timeout=10) as conn:
            action(conn)

    def create_database(self, name: str | None = None, template: str | None = None) -> str:
        """CREATE DATABASE NAME (default: a unique ``t_<hex>``), copied from ``template``
        if given; returns its URL."""
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        if not _NAME_RE.fullmatch(name):
            # Unquoted-identifier rules keep the name the same in SQL and in the URL.
            raise ValueError(f"not a plain lower-case database name: {name!r}")

        def create(conn: psycopg.Connection[Any]) -> None:
            statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template is not None:
                statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
            conn.execute(statement)

        self._admin(create)
        return self.url(name)

    def drop_database(self, name_or_url: str) -> None:
        """Drop a database (by name or URL) even while connections to it are open."""
        name = _database_name(name_or_url)

        def drop(conn: psycopg.Connection[Any]) -> None:
            # Open connections would make DROP DATABASE fail: end them first. WITH (FORCE)
            # (PostgreSQL >= 13) also ends those that connect between the two statements.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
            force = sql.SQL(" WITH (FORCE)") if conn.info.server_version >= 130000 else sql.SQL("")
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}{}").format(sql.Identifier(name), force)
            )

        self._admin(drop)

    # -- stop --------------------------------------------------------------------------

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGQUIT)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        """Immediate shutdown, then delete the directory. Safe to call more than once."""
        if self._stopped:
            return
        self._stopped = True
        self._port = None
        with contextlib.suppress(Exception):
            atexit.unregister(self._stop_at_exit)
        self._terminate()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _stop_at_exit(self) -> None:
        if os.getpid() == self._owner_pid:
            self.stop()

    def __enter__(self) -> PostgresServer:
        if self.tmp is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
