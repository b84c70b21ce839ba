"""The console's files (``control_plane/remote/console/``: HTML, CSS and JavaScript
modules, shipped in the package, no build step), served at ``/`` with headers that keep the
page to itself: no script, style or connection from elsewhere, no framing, no referrer."""

from __future__ import annotations

from pathlib import Path

from starlette.staticfiles import StaticFiles

from control_plane.remote.telemetry import App, Message, Receive, Scope, Send

CONSOLE_DIR = Path(__file__).parent / "console"

HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),  # a new release's console, not yesterday's
]


def console_files() -> App:
    files = StaticFiles(directory=CONSOLE_DIR, html=True)

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await files(scope, receive, with_headers)

    return serve
