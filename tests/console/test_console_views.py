"""The session view's parts in a real browser, each with real sessions of the example agent:
a turn's file changes (the diff of its workspace checkpoint, and the diff an agent reports in
a tool call), a plan that updates in place as its steps are done, the subagent tree with each
child's state (refreshed live), the transcript export, and a permission opened from a
webhook's deep link (through the login). Screenshots for docs/console.md."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import eventually
from tests.console.test_console import (
    DESKTOP,
    PHONE,
    base_url,
    logged_in,
    terminal_session,
    wait_text,
)
from tests.support.cp_harness import example_agent, open_cp
from tests.support.remote_client import ListenServer, make_token, running_server, ws_client

pytestmark = pytest.mark.anyio


def git_repo(path: Path) -> Path:
    path.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)

    git("init", "-q")
    (path / "a.txt").write_text("".join(f"row{i}\n" for i in range(1, 13)))
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return path


async def open_session(browser: Any, server: ListenServer, sid: str, size: dict[str, int]) -> Any:
    page = await logged_in(browser, server, server.secret, size)
    await page.goto(base_url(server) + f"#/s/{sid}")
    await page.wait_for_selector("#stream-status:text('live')")
    return page


async def test_a_turns_file_changes_from_its_checkpoint_and_the_diff_its_tool_call_reports(
    browser: Any, tmp_path: Path, db: str, screenshots: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    # (a directive is one word: the file's lines have no spaces)
    edited = "".join(f"row{i}\n" for i in range(1, 13)).replace("row6\n", "ROW6\n")
    prompt = "#edit=a.txt:" + edited.replace("\n", "\\n") + " #write=notes.txt:fresh tidy up"
    with open_cp(tmp_path, db=db) as cp:
        spawned = cp.spawn(example_agent(tmp_path), repo, prompt, workspace="worktree")
        assert spawned.command is not None and cp.wait(spawned.command.id, 60).ok
        sid, seq = spawned.session.id, spawned.command.seq
        eventually(lambda: bool(cp.events_of_kinds(sid, ("checkpoint",))), what="a checkpoint")
    with running_server(tmp_path / "serve", token_name="console-tests", db=db) as server:
        page = await open_session(browser, server, sid, DESKTOP)
        # The agent's own report: a unified diff with three lines of context, not the file.
        tool = await page.wait_for_selector(".tool.completed .diff[data-path='a.txt']")
        text = await tool.inner_text()
        assert "@@ -3,7 +3,7 @@" in text and "-row6\n+ROW6" in text, text
        assert "row2" not in text and "row10" not in text  # outside the context
        assert "+1 \N{MINUS SIGN}1" in text
        await page.screenshot(path=str(screenshots / "tool-diff-desktop.png"))
        # The turn's checkpoint: every file it changed, from git.
        link = await page.wait_for_selector(f"#workspace li[data-turn='{seq}'] a")
        await link.click()
        await page.wait_for_selector("#turn-diff details[data-path='notes.txt']")
        changed = await page.inner_text("#turn-diff")
        assert f"refs/acpctl/{sid}/{seq}: 2 files changed" in changed
        assert "-row6\n+ROW6" in changed and "+fresh" in changed
        await page.screenshot(path=str(screenshots / "turn-diff-desktop.png"), full_page=True)
        await page.click("#back")
        await page.wait_for_selector("#stream-status:text('live')")
        # A turn that has no checkpoint says so.
        await page.goto(base_url(server) + f"#/s/{sid}/turns/{seq + 7}")
        alert = await page.wait_for_selector("#turn-diff [role=alert]")
        assert "has no checkpoint of turn" in await alert.inner_text()


async def test_a_plan_is_one_card_per_turn_updated_as_its_steps_are_done(
    browser: Any, server: ListenServer, tmp_path: Path, screenshots: Path
) -> None:
    sid = await terminal_session(server, tmp_path)
    page = await open_session(browser, server, sid, DESKTOP)
    await page.fill("#prompt", "#plan-steps #delay=600 planned work")
    await page.keyboard.press("Enter")
    await page.wait_for_selector(".plan .progress:text('0 of 3 done')")
    first = await page.query_selector(".plan li:first-child")
    assert first is not None and await first.get_attribute("data-status") == "in_progress"
    # A step done, the plan not: its card redrawn in place. Either middle state will do: the
    # updates are 0.6 s apart, and CI once saw a loaded machine's page pass "1 of 3" unseen.
    await page.wait_for_selector(".plan .progress:text-matches('^[12] of 3 done$')")
    statuses = await page.eval_on_selector_all(".plan li", "ls => ls.map(l => l.dataset.status)")
    done = statuses.count("completed")
    assert statuses == ["completed"] * done + ["in_progress"] + ["pending"] * (2 - done)
    await page.screenshot(path=str(screenshots / "plan-desktop.png"))
    await page.wait_for_selector(".plan .progress:text('3 of 3 done')")
    await page.wait_for_selector(".stop:text('end_turn')")
    plans = await page.query_selector_all(".plan")
    assert len(plans) == 1, "a plan update redraws the turn's plan card"
    entries = [await e.inner_text() for e in await page.query_selector_all(".plan li .entry")]
    assert entries == ["Read the code", "Change it", "Run the tests"]
    priorities = await page.eval_on_selector_all(
        ".plan li", "ls => ls.map(l => l.dataset.priority)"
    )
    assert priorities == ["high", "medium", "low"]
    # The next turn's plan is a card of its own; a reload replays both as they ended.
    await page.fill("#prompt", "#plan-steps again")
    await page.keyboard.press("Enter")
    await wait_text(page, r"Echo: again")
    await page.reload()
    await wait_text(page, r"Echo: again")
    assert [await p.inner_text() for p in await page.query_selector_all(".plan .progress")] == [
        "3 of 3 done",
        "3 of 3 done",
    ]


async def test_the_subagent_tree_shows_each_childs_state_and_follows_changes(
    browser: Any, tmp_path: Path, db: str, screenshots: Path
) -> None:
    agent = example_agent(tmp_path)
    with open_cp(tmp_path, db=db) as cp:
        parent = cp.spawn(agent, tmp_path, "plan the work").session.id
        kids = []
        for name in ("research", "implement"):
            child = cp.spawn(
                agent, tmp_path, name, parent=parent, announce=False, metadata={"title": name}
            )
            assert child.command is not None and cp.wait(child.command.id, 60).ok
            kids.append(child.session.id)
        grand = cp.spawn(agent, tmp_path, "tests", parent=kids[1], announce=False)
        assert grand.command is not None and cp.wait(grand.command.id, 60).ok
    with running_server(tmp_path / "serve", token_name="console-tests", db=db) as server:
        page = await open_session(browser, server, parent, DESKTOP)
        tree = "#subagents ul.tree"
        nested = (
            f"{tree} li[data-session='{kids[1]}'] ul.tree li[data-session='{grand.session.id}']"
        )
        await page.wait_for_selector(nested)
        assert await page.inner_text("#subagents strong") == "Subagents (3)"
        row = await page.inner_text(f"{tree} li[data-session='{kids[0]}'] .node")
        assert "idle" in row and "last turn completed (end_turn)" in row, row
        await page.screenshot(path=str(screenshots / "subagents-desktop.png"))
        # Live: a child closed by another client shows as closed without a reload.
        async with ws_client(server.ws_url, server.secret) as terminal:
            await terminal.initialize()
            params = {"sessionId": kids[0], "cwd": str(tmp_path), "mcpServers": []}
            await terminal.request("session/load", params)
            await terminal.request("session/close", {"sessionId": kids[0]})
        await page.wait_for_selector(f"{tree} li[data-session='{kids[0]}'][data-state='closed']")
        # Each child is a link to its own view, which links back to its parent.
        await page.click(f"{tree} li[data-session='{kids[1]}'] > .node a")
        await page.wait_for_selector(f"{tree} li[data-session='{grand.session.id}']")
        # The header shows the session's id until its details arrive, then its name: the
        # tree can render first (a CI run read the id).
        await page.wait_for_selector("h1:text-is('implement')")
        assert await page.inner_text("h1") == "implement"
        await page.click("#parent-link")
        await page.wait_for_selector(nested)


async def test_the_transcript_export_is_reached_from_the_session_view(
    browser: Any, server: ListenServer, tmp_path: Path
) -> None:
    sid = await terminal_session(server, tmp_path, "#tool exported words")
    page = await open_session(browser, server, sid, PHONE)
    await wait_text(page, r"Echo: exported words")
    await page.focus("#export")  # at the top of the page, before the conversation
    async with page.expect_download() as download_info:
        await page.keyboard.press("Enter")
    download = await download_info.value
    assert download.suggested_filename == f"{sid}.jsonl"
    lines = [json.loads(line) for line in Path(await download.path()).read_text().splitlines()]
    assert lines[0]["type"] == "session" and lines[0]["id"] == sid
    assert "exported words" in json.dumps(lines)


async def test_a_permission_link_lands_on_the_request_through_the_login(
    browser: Any, server: ListenServer, tmp_path: Path, screenshots: Path
) -> None:
    phone_token = make_token(server.db, "terminal")
    async with ws_client(server.ws_url, phone_token, permission="ignore") as terminal:
        await terminal.initialize()
        sid = await terminal.new_session(str(tmp_path))
        turn = asyncio.create_task(terminal.prompt(sid, "#permission #tool from a webhook"))
        await terminal.wait_for(lambda: bool(terminal.permission_requests))
        request_id = terminal.permission_requests[0]["id"]
        link = base_url(server) + f"#/s/{sid}?permission={request_id}"
        # Opened from the webhook: not logged in yet; the login keeps the link.
        page = await browser.new_page(viewport=PHONE)
        await page.goto(link)
        await page.fill("#token", server.secret)
        await page.click("button[type=submit]")
        card = await page.wait_for_selector(f"[role=dialog].target[data-request='{request_id}']")
        focused = await page.evaluate("document.activeElement.dataset.kind")
        assert focused == "allow_once", "the request's first option has the focus"
        await page.screenshot(path=str(screenshots / "permission-link-phone.png"))
        await (await card.query_selector("button[data-kind=allow_once]")).click()
        outcome = await page.wait_for_selector("#permission-outcome")
        assert await outcome.inner_text() == "answered: allow by console-tests"
        assert (await turn)["stopReason"] == "end_turn"
        # Opened again later: it says how it was answered.
        await page.goto(base_url(server) + "#/")
        await page.goto(link)
        outcome = await page.wait_for_selector("#permission-outcome")
        assert await outcome.inner_text() == "answered: allow by console-tests"
        # Answered in the terminal while the link is open: the page says by whom.
        turn = asyncio.create_task(terminal.prompt(sid, "#permission #tool once more"))
        await terminal.wait_for(lambda: len(terminal.permission_requests) == 2)
        second = terminal.permission_requests[1]
        await page.goto(base_url(server) + f"#/s/{sid}?permission={second['id']}")
        await page.wait_for_selector(f"[role=dialog].target[data-request='{second['id']}']")
        await terminal.answer_permission(second, "reject")
        outcome = await page.wait_for_selector("#permission-outcome")
        assert await outcome.inner_text() == "answered: reject by terminal"
        assert (await turn)["stopReason"] == "end_turn"
    await page.goto(base_url(server) + f"#/s/{sid}?permission=acpctl-permission-unknown")
    missing = await page.wait_for_selector("#permission-link:has-text('not found')")
    assert "has no permission request" in await missing.inner_text()
