"""A fleet of control-plane nodes as real processes on one real PostgreSQL database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer

LEASE_S = 3.0
DISCOVER_S = 0.5


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[str]
    owner: str
    log: Path

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Fleet:
    db: str
    work: Path
    nodes: list[Node] = field(default_factory=list)

    def start(
        self,
        name: str,
        labels: tuple[str, ...] = (),
        lease_s: float = LEASE_S,
        discover_s: float = DISCOVER_S,
        db: str | None = None,
    ) -> Node:
        """A node process on the fleet's database (or ``db``: the same one by another way,
        e.g. through a proxy)."""
        log = self.work / f"node-{name}-{len(self.nodes)}.log"
        argv = [db or self.db, str(self.work), name, ",".join(labels) or "-", str(lease_s)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.node_driver", *argv, str(discover_s)],
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], f"node {name} did not start: {log.read_text()[-2000:]}"
        node = Node(name, proc, line[1], log)
        self.nodes.append(node)
        return node

    def by_owner(self, owner: str | None) -> Node | None:
        return next((n for n in self.nodes if n.owner == owner), None)

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.proc.poll() is None:
                with_cont = node.proc.pid
                os.kill(with_cont, signal.SIGCONT)  # a stopped node cannot handle SIGTERM
                node.proc.terminate()
        for node in self.nodes:
            try:
                node.proc.wait(30)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)


@pytest.fixture
def fleet(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[Fleet]:
    db = postgres_server.create_database(template="acpctl_template")
    fleet = Fleet(db, tmp_path)
    try:
        yield fleet
    finally:
        fleet.stop_all()
