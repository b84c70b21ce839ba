from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest

from store import AgentSpec, Store
from tests.support.agent_harness import AgentHarness
from tests.support.postgres import MISSING_REASON, PostgresServer, find_server_binaries

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
# Child processes (crash drivers, agents) import the project from the checkout.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)

AGENT = AgentSpec(name="test-agent", command=(sys.executable, "-c", "pass"))


def pytest_configure(config: pytest.Config) -> None:
    """A run started in the background of a shell without job control (``nohup``, ``cmd &``
    in a script) inherits SIGINT ignored, and so would every process it starts: Python then
    installs no ``KeyboardInterrupt`` handler, and an ignored signal stays ignored across
    ``exec``. The tests that press Ctrl-C on a batch, and the reaper's test of the agent's
    dispositions, need what a terminal's foreground job has; a handled signal is reset to the
    default in every child."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A SQLite store file, for the tests about the file itself (bad files, faults, WAL)."""
    return tmp_path / "cp.db"


@pytest.fixture(autouse=True)
def data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$XDG_DATA_HOME`` of this test and its subprocesses, outside ``tmp_path``: with a
    PostgreSQL store, ``acpctl`` keeps the machine's agent logs under it
    (``acpctl/agent-logs``), and they must not land in the real home directory.
    ``$XDG_STATE_HOME`` beside it: the example agent keeps its sessions there when not given
    ``--state-file``. One file shared by every test of every run grew without end (700 MB on
    a machine after a day of runs) and made each ``session/load`` and ``session/resume``
    slower than the last; each test's agents now share a file of their own."""
    path = tmp_path_factory.mktemp("data-home")
    monkeypatch.setenv("XDG_DATA_HOME", str(path))
    monkeypatch.setenv("XDG_STATE_HOME", str(path / "state"))
    return path


# Every test that takes ``db`` (or ``store``) runs once per backend.
BACKENDS = ("sqlite", "postgresql")
_TEMPLATE = "acpctl_template"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server per test process (each xdist worker its own), started from the
    machine's server binaries in a temporary directory; a database migrated to head is kept
    as the template every test's database is copied from (a copy costs a fraction of a
    migration)."""
    bin_dir = find_server_binaries()
    if bin_dir is None:
        if os.environ.get("ACPCTL_POSTGRES") == "required":
            pytest.fail(f"ACPCTL_POSTGRES=required, and {MISSING_REASON}")
        pytest.skip(MISSING_REASON)
    server = PostgresServer(bin_dir)
    server.start()
    try:
        Store.open(server.create_database(_TEMPLATE)).close()
        yield server
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store to open, once per backend: a SQLite file path, or the URL of a new
    PostgreSQL database of its own (with a store identity of its own)."""
    if request.param == "sqlite":
        return str(tmp_path / "cp.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    url = server.create_database(template=_TEMPLATE)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE store_identity SET id = %s", (uuid.uuid4().hex,))
    return url


@pytest.fixture(params=BACKENDS)
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Like ``db``, but nothing in it yet: the first open migrates it from nothing."""
    if request.param == "sqlite":
        return str(tmp_path / "cp.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
def store(db: str) -> Iterator[Store]:
    s = Store.open(db)
    try:
        yield s
    finally:
        s.close()


def live_pids(proc_file: str, needle: bytes) -> list[int]:
    """Live processes (zombies excluded) whose ``/proc/PID/<proc_file>`` (``cmdline``,
    ``environ``) holds ``needle``: how tests find what a run left behind."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/{proc_file}", "rb") as fh:
                content = fh.read()
        except OSError:
            continue
        if needle in content and pid_alive(int(name)):
            found.append(int(name))
    return found


def pid_alive(pid: int) -> bool:
    """Whether a process runs (a zombie, already dead but not reaped, counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError):  # gone, also between open and read
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def eventually(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.05,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; an
    ``AssertionError`` naming ``what`` after ``timeout`` seconds. For conditions, never a
    sleep that stands in for one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached in {timeout}s")
        time.sleep(interval)


# What the default run (the README's ``pytest``) leaves to the full matrix (``pytest -m full``,
# which .ci/run runs), by directory: suites that need what a fresh machine may lack, or that
# repeat a behaviour the default run covers with a representative (docs/operations.md,
# "Running the tests").
FULL_DIRS = {
    "real_agents": "real agents: Node.js and their npm packages",
    "console": "the console in a real Chromium",
    "crash": "the crash and fault loops (real kill -9, a full tmpfs)",
    "nodes": "fleets of node processes on PostgreSQL",
}

# The longest tests go first, so that with pytest-xdist no worker is left running one of them
# alone at the end of the run: the real agents (Node start-up, kill -9 and restart), then the
# default run's modules whose tests kill and restart control planes or wait out leases.
LONG_FIRST = (
    "real_agents",
    "nodes",
    "test_mcp_tools",
    "test_two_processes",
    "test_cli",
    "test_session_actors",
    "test_serve",
    "test_subagents",
    "test_remote_attach",
    "test_remote_operations",
    "test_remote_resume",
    "test_storage_faults",
    "test_serve_passthrough",
)


def _on_postgresql(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgresql" in callspec.params.values()


def _in_full_matrix(item: pytest.Item) -> bool:
    """Whether the default run leaves ``item`` to ``pytest -m full``: everything in
    ``FULL_DIRS`` and every PostgreSQL variant, except where the behaviour itself is the
    backend's (``backend_specific``: the store's statements, migrations, claims,
    notifications, ownership; one fleet test), and whatever a test marks ``full`` itself."""
    if item.get_closest_marker("full") is not None:
        return True
    backend_specific = item.get_closest_marker("backend_specific") is not None
    if item.path.parent.name == "nodes":
        return not backend_specific
    if item.path.parent.name in FULL_DIRS:
        return True
    return _on_postgresql(item) and not backend_specific


def _long_rank(item: pytest.Item) -> int:
    for rank, name in enumerate(LONG_FIRST):
        if name in (item.path.parent.name, item.path.stem):
            return rank
    return len(LONG_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the full matrix (``full``) and the crash loops (``crash``: the ``*_loop.py``
    modules under tests/crash/, run one at a time by ``pytest -n 0 -m 'crash and not
    slow'``; the single-kill tests beside them run with the rest of the full matrix), then puts
    the longest tests first."""
    for item in items:
        if item.path.parent.name == "crash" and item.path.stem.endswith("_loop"):
            item.add_marker(pytest.mark.crash)
        if _in_full_matrix(item) and item.get_closest_marker("full") is None:
            item.add_marker(pytest.mark.full)
    items.sort(key=_long_rank)  # stable: the files' own order within a rank


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[AgentHarness]:
    """An agent connection harness on the protocol loop (tests/support/agent_harness.py),
    closed after the test."""
    h = AgentHarness(tmp_path)
    try:
        yield h
    finally:
        h.close()
