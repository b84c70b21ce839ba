"""Prometheus metrics: the text format at /metrics, parsed by the client library's own
parser, with values checked against a known run."""

from __future__ import annotations

import asyncio
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import cast

import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.interfaces import Client as AcpClient
from acp.schema import ClientCapabilities
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from control_plane import Budget, BudgetExceeded
from control_plane.cli import app
from control_plane.metrics import MetricsServer
from store import Store
from store.ops import budgets
from store.usage import BudgetStop
from store.writer import WriteContext
from tests.conftest import AGENT, eventually
from tests.integration.test_serve import Client, _env
from tests.support.cp_harness import example_agent, open_cp
from tests.support.store_contents import nothing_stored

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(host: str, port: int) -> Samples:
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_known_run_shows_in_the_counters_and_the_levels(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        server = MetricsServer(cp, "127.0.0.1", 0)
        try:
            before = scrape(*server.address)
            spawned = cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=5 hi")
            sid = spawned.session.id
            assert spawned.command is not None and cp.wait(spawned.command.id, 30).ok
            for _ in range(2):
                assert cp.wait(cp.prompt(sid, "#chunks=5 hi").id, 30).ok
            limited = cp.spawn(example_agent(tmp_path), tmp_path, "#chunks=5 x", budget=Budget(1))
            assert limited.command is not None and cp.wait(limited.command.id, 30).ok
            with pytest.raises(BudgetExceeded):
                cp.prompt(limited.session.id, "refused")
            assert cp.wait_delivered(10)
            # A turn's slot is given back by its actor just after its outcome committed.
            eventually(lambda: value(scrape(*server.address), "acpctl_running_turns") == 0)
            after = scrape(*server.address)
        finally:
            server.close()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    # four turns ended ok: three in one session, one in the budgeted one
    assert delta("acpctl_turns_total", status="ok") == 4
    assert delta("acpctl_turn_duration_seconds_count") == 4
    assert delta("acpctl_queue_wait_seconds_count") == 4
    assert delta("acpctl_agent_starts_total", outcome="started") == 2
    assert delta("acpctl_tokens_total", kind="input") == 8  # 2 words per prompt
    assert delta("acpctl_tokens_total", kind="output") == 20  # 5 chunks per turn
    assert delta("acpctl_session_updates_total") >= 4 * 5  # chunks, thoughts, commands
    assert delta("acpctl_budget_refusals_total") == 1
    assert delta("acpctl_budget_stops_total", budget="session tokens") == 1
    assert delta("acpctl_store_commit_group_size_count") > 0
    assert delta("acpctl_store_commit_seconds_count") > 0
    # the levels at the end of that run, read from this control plane and its store
    assert value(after, "acpctl_running_turns") == 0
    assert value(after, "acpctl_queued_commands") == 0
    assert value(after, "acpctl_live_sessions") == 2
    assert value(after, "acpctl_sessions", state="idle") == 2
    assert value(after, "acpctl_usage_tokens") == 28
    assert value(after, "acpctl_sessions_stopped_by_budget") == 1
    assert value(after, "acpctl_delivery_lag_events_sum") == 0


def test_closing_the_server_frees_its_port(tmp_path: Path, db: str) -> None:
    with open_cp(tmp_path, db=db) as cp:
        server = MetricsServer(cp, "127.0.0.1", 0)
        host, port = server.address
        assert value(scrape(host, port), "acpctl_running_turns") == 0
        server.close()
        with pytest.raises(urllib.error.URLError):
            scrape(host, port)
        MetricsServer(cp, host, port).close()  # the same port can be taken again


def test_serve_with_metrics_counts_its_turns(tmp_path: Path, db: str) -> None:
    (tmp_path / "none.toml").write_text("")
    agent = f"{sys.executable} -m protocol.example_agent --state-file {tmp_path / 'a.json'}"
    argv = ["-m", "control_plane.cli", "--db", db, "serve"]
    argv += ["--agent", agent, "--metrics", "127.0.0.1:0"]
    log_path = tmp_path / "serve.log"

    async def run() -> Samples:
        with log_path.open("ab") as log:
            async with spawn_agent_process(
                cast(AcpClient, Client()),
                sys.executable,
                *argv,
                env=_env(tmp_path),
                cwd=str(tmp_path),
                transport_kwargs={"stderr": log.fileno(), "shutdown_timeout": 5},
            ) as (conn, _proc):
                await conn.initialize(
                    protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
                )
                found = re.search(r"metrics at http://([\d.]+):(\d+)/metrics", log_path.read_text())
                assert found, log_path.read_text()
                sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
                reply = await conn.prompt(session_id=sid, prompt=[text_block("#chunks=3 hi")])
                assert reply.stop_reason == "end_turn"
                host, port = found.group(1), int(found.group(2))
                # The turn's slot is a level of "now": the actor gives it back right after
                # the outcome commit that answered the prompt, which may be just after.
                async with asyncio.timeout(10):
                    while True:
                        samples = await asyncio.to_thread(scrape, host, port)
                        if value(samples, "acpctl_running_turns") == 0:
                            return samples
                        await asyncio.sleep(0.05)

    samples = asyncio.run(run())
    assert value(samples, "acpctl_turns_total", status="ok") == 1  # a fresh process
    assert value(samples, "acpctl_tokens_total", kind="output") == 3
    assert value(samples, "acpctl_running_turns") == 0


@pytest.mark.parametrize("bad", ["9464", "host:", ":80", "h:99999", "h:port"])
def test_a_bad_metrics_address_is_refused_before_anything_runs(
    tmp_path: Path, db: str, bad: str
) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"id": "a", "prompt": "hi"}\n')
    result = CliRunner().invoke(
        app,
        ["--db", db, "batch", str(tasks), "--metrics", bad],
        env={"ACPCTL_CONFIG": str(tmp_path / "none.toml")},
    )
    assert result.exit_code == 2, result.output
    assert "HOST:PORT" in result.output
    assert nothing_stored(db)


def test_a_budget_stop_is_counted_when_committed_and_not_when_undone(store: Store) -> None:
    """The counter moves after the commit (``after_commit``), so a write that runs again (a
    retried PostgreSQL group) or a part of one that is undone counts nothing twice or for
    nothing."""
    spawned = store.spawn(AGENT, "/tmp", None, None, None)
    sid = spawned.session.id
    reached = BudgetStop("session tokens", 1, 2)

    def stops() -> float:
        labels = {"budget": reached.budget}
        return REGISTRY.get_sample_value("acpctl_budget_stops_total", labels) or 0.0

    def undone(ctx: WriteContext) -> tuple[bool, object]:
        def stop_then_fail(inner: WriteContext) -> None:
            assert budgets.stop(inner, [sid], reached) == [sid]
            raise ValueError("this part is undone")

        return ctx.isolated(stop_then_fail)

    before = stops()
    ok, _ = store.write(undone)
    assert not ok and stops() == before
    assert store.write(lambda ctx: budgets.stop(ctx, [sid], reached)) == [sid]
    assert stops() == before + 1
