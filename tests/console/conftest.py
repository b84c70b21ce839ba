"""Browser tests of the console: a real headless Chromium (the system's: Debian's
``chromium`` package; Playwright cannot download browsers here) driven by Playwright, against
a real ``serve --listen`` subprocess. Skipped with the reason when either is missing, unless
``ACPCTL_REAL_AGENTS=required`` (``.ci/run``), which makes that an error."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.remote_client import ListenServer, running_server

INSTALL = (
    "install Chromium (apt-get install chromium) and the test extra (pip install -e '.[test]')"
)
DOCS_SCREENSHOTS = Path(__file__).parents[2] / "docs" / "console"
# Set to refresh the screenshots of docs/console.md; a plain run keeps them out of the tree.
REFRESH = "ACPCTL_REFRESH_SCREENSHOTS"


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the browser tests save their screenshots: docs/console/ under
    ``ACPCTL_REFRESH_SCREENSHOTS=1``, else a temporary directory (a test run must not
    rewrite files under version control, and every run did)."""
    if os.environ.get(REFRESH) == "1":
        return DOCS_SCREENSHOTS
    return tmp_path_factory.mktemp("console-screenshots")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _skip_reason() -> str | None:
    reason: str | None = None
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        reason = f"Playwright is not installed ({INSTALL})"
    else:
        if chromium_path() is None:
            reason = f"no Chromium on this machine ({INSTALL})"
    if reason is not None and os.environ.get("ACPCTL_REAL_AGENTS") == "required":
        raise RuntimeError(f"ACPCTL_REAL_AGENTS=required, but {reason}")
    return reason


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path, db: str) -> Iterator[ListenServer]:
    """A started ``serve --listen`` on ``db``: every test that takes it runs on each backend."""
    with running_server(tmp_path, token_name="console-tests", db=db) as started:
        yield started


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox"], headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()
