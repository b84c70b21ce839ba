"""The console in a real browser: log in, watch a turn stream, prompt, approve a permission
request while a second client is attached (both sides resolve), cancel, reload mid-turn
without a duplicate, a watch-only token cannot prompt, a wrong token is refused. The
screenshots in docs/console/ are taken here, so they show the console as it is."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from store.tokens import TokenAccess
from tests.support.remote_client import ListenServer, make_token, ws_client

pytestmark = pytest.mark.anyio

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def base_url(server: ListenServer) -> str:
    return f"http://127.0.0.1:{server.port}/"


async def logged_in(browser: Any, server: ListenServer, secret: str, size: dict[str, int]) -> Any:
    page = await browser.new_page(viewport=size)
    await page.goto(base_url(server))
    await page.fill("#token", secret)
    await page.click("button[type=submit]")
    await page.wait_for_selector("h1:text('Sessions')")
    return page


async def terminal_session(server: ListenServer, cwd: Path, *prompts: str) -> str:
    """A session made, and prompted, by a terminal client (not the browser)."""
    async with ws_client(server.ws_url, server.secret) as client:
        await client.initialize()
        sid = await client.new_session(str(cwd))
        for text in prompts:
            await client.prompt(sid, text)
    return sid


async def conversation_text(page: Any) -> str:
    return str(await page.inner_text(".conversation"))


async def wait_text(page: Any, pattern: str, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not re.search(pattern, await conversation_text(page), re.S):
            await asyncio.sleep(0.05)


async def test_a_wrong_token_is_refused_and_a_good_one_logs_in(
    browser: Any, server: ListenServer, tmp_path: Path, screenshots: Path
) -> None:
    page = await browser.new_page(viewport=DESKTOP)
    await page.goto(base_url(server))
    await page.screenshot(path=str(screenshots / "login.png"))
    await page.fill("#token", "acpctl_" + "x" * 43)
    await page.click("button[type=submit]")
    await page.wait_for_selector("#login-error:text('refused')")
    sid = await terminal_session(server, tmp_path, "hello from a terminal")
    await page.fill("#token", server.secret)
    await page.click("button[type=submit]")
    await page.wait_for_selector(f"tr[data-session='{sid}']")
    await page.screenshot(path=str(screenshots / "sessions-desktop.png"))
    phone = await logged_in(browser, server, server.secret, PHONE)
    await phone.wait_for_selector(f"tr[data-session='{sid}']")
    await phone.screenshot(path=str(screenshots / "sessions-phone.png"))


async def test_watch_prompt_and_reload_mid_turn_without_a_duplicate(
    browser: Any, server: ListenServer, tmp_path: Path, screenshots: Path
) -> None:
    sid = await terminal_session(server, tmp_path, "an earlier turn")
    page = await logged_in(browser, server, server.secret, DESKTOP)
    await page.click(f"tr[data-session='{sid}'] a")
    await wait_text(page, r"Echo: an earlier turn")  # earlier turns, from the store
    await page.fill("#prompt", "#chunks=150 #delay=20 streaming")
    await page.keyboard.press("Enter")
    await wait_text(page, r"\bc20\b")
    await page.reload()  # mid-turn: the console loads the session again and goes live
    await wait_text(page, r"\bc149\b", timeout=60)
    text = await conversation_text(page)
    chunks = [int(n) for n in re.findall(r"\bc(\d+)\b", text)]
    assert chunks == list(range(150)), "every chunk once, in order, across the reload"
    assert text.count("an earlier turn") == 2  # the prompt and its echo, once each
    await page.screenshot(path=str(screenshots / "session-desktop.png"), full_page=False)


async def test_a_permission_request_resolves_on_both_sides(
    browser: Any, server: ListenServer, tmp_path: Path, screenshots: Path
) -> None:
    async with ws_client(server.ws_url, server.secret, permission="ignore") as terminal:
        await terminal.initialize()
        sid = await terminal.new_session(str(tmp_path))
        page = await logged_in(browser, server, server.secret, PHONE)
        await page.goto(base_url(server) + f"#/s/{sid}")
        await page.wait_for_selector("#stream-status:text('live')")
        # Answered in the browser: the terminal client is told it is resolved.
        await page.fill("#prompt", "#permission #tool from the console")
        await page.keyboard.press("Enter")
        dialog = await page.wait_for_selector("[role=dialog]")
        await wait_text(page, r"#permission #tool from the console")  # shown when sent
        await page.screenshot(path=str(screenshots / "permission-phone.png"))
        await terminal.wait_for(lambda: bool(terminal.permission_requests))
        await (await dialog.query_selector("button[data-kind=allow_once]")).click()
        await wait_text(page, r"permission: allowed")
        await terminal.wait_for(lambda: terminal.permission_requests[0]["id"] in terminal.withdrawn)
        # Answered in the terminal: the browser's dialog says so.
        turn = asyncio.create_task(terminal.prompt(sid, "#permission #tool from the terminal"))
        await page.wait_for_selector("[role=dialog] button")
        await terminal.wait_for(lambda: len(terminal.permission_requests) == 2)
        await terminal.answer_permission(terminal.permission_requests[1], "reject")
        await page.wait_for_selector("[role=dialog] :text('Answered elsewhere')")
        assert (await turn)["stopReason"] == "end_turn"
        await wait_text(page, r"permission: rejected")


async def test_cancel_from_the_console_ends_the_turn(
    browser: Any, server: ListenServer, tmp_path: Path
) -> None:
    sid = await terminal_session(server, tmp_path)
    page = await logged_in(browser, server, server.secret, DESKTOP)
    await page.goto(base_url(server) + f"#/s/{sid}")
    await page.wait_for_selector("#stream-status:text('live')")
    await page.fill("#prompt", "#chunks=1000 #delay=20 long")
    await page.keyboard.press("Enter")
    await wait_text(page, r"\bc5\b")
    await page.click("#cancel")
    await wait_text(page, r"— cancelled —")
    assert "c999" not in await conversation_text(page)


async def test_a_watch_only_token_gets_a_read_only_console(
    browser: Any, server: ListenServer, tmp_path: Path, screenshots: Path
) -> None:
    watcher = make_token(server.db, "phone", access=TokenAccess.WATCH)
    sid = await terminal_session(server, tmp_path, "visible to the watcher")
    page = await logged_in(browser, server, watcher, DESKTOP)
    assert "watch" in await page.inner_text("#who")
    await page.goto(base_url(server) + f"#/s/{sid}")
    await wait_text(page, r"Echo: visible to the watcher")
    assert await page.is_disabled("#prompt")
    assert await page.is_disabled("#send")
    assert await page.is_disabled("#cancel")
    assert await page.is_disabled("#close-session")
    await page.goto(base_url(server) + "#/status")
    await page.wait_for_selector("h1:text('Status')")
    await page.wait_for_selector("dt:text('Running commands')")
    # The server is a node of its store: its row shows its lease and load.
    row = await page.wait_for_selector("#nodes tbody tr[data-node]")
    assert row is not None and "live" in await row.inner_text()
    await page.screenshot(path=str(screenshots / "status-desktop.png"))


async def test_a_plan_and_a_tool_call_render_and_the_transcript_downloads(
    browser: Any, server: ListenServer, tmp_path: Path
) -> None:
    sid = await terminal_session(server, tmp_path)
    page = await logged_in(browser, server, server.secret, DESKTOP)
    await page.goto(base_url(server) + f"#/s/{sid}")
    await page.wait_for_selector("#stream-status:text('live')")
    await page.fill("#prompt", "#plan #tool planned work")
    await page.keyboard.press("Enter")
    tool = await page.wait_for_selector(".tool.completed")
    assert "echo-tool" in await tool.inner_text()
    assert "tool output: planned work" in await tool.inner_text()
    # The example agent sends the plan after the tool call: read it once the turn has ended.
    await page.wait_for_selector(".stop:text('end_turn')")
    plan = await page.query_selector_all(".plan li .entry")
    assert [await li.inner_text() for li in plan] == ["Read the message", "Echo the message"]
    assert await page.get_attribute(".plan li:first-child", "class") == "completed"
    # The transcript export downloads the session as JSONL.
    async with page.expect_download() as download_info:
        await page.click("#export")
    download = await download_info.value
    exported = Path(await download.path()).read_text()
    assert '"type":"session"' in exported.replace(" ", "") and "planned work" in exported


async def test_the_search_box_finds_a_session_by_what_was_said(
    browser: Any, server: ListenServer, tmp_path: Path
) -> None:
    """The list searches on the server: typing a word shows the sessions whose prompt or
    answer has it, with the words around it; clearing it brings the whole list back."""
    walrus = await terminal_session(server, tmp_path, "the walrus migration plan")
    other = await terminal_session(server, tmp_path, "an unrelated chore")
    page = await logged_in(browser, server, server.secret, DESKTOP)
    await page.wait_for_selector(f"tr[data-session='{other}']")
    await page.fill("input[type=search]", "walrus")
    await page.wait_for_selector(f"tr[data-session='{other}']", state="detached")
    row = await page.wait_for_selector(f"tr[data-session='{walrus}']")
    assert "walrus migration plan" in await row.inner_text()  # the match's snippet
    await page.fill("input[type=search]", "")
    await page.wait_for_selector(f"tr[data-session='{other}']")
    assert await page.query_selector(f"tr[data-session='{walrus}']") is not None
