"""A real HTTP receiver for webhook tests: a threaded server on 127.0.0.1 that records every
request and answers as the test scripts it: accept, fail (any status), delay, hold until
released, or drop the connection mid-request.

``acked`` holds what it acknowledged: requests whose 2xx answer it wrote whole and flushed.
A control plane killed after that but before its checkpoint moved sends the same one again,
which is the "one in flight" the kill tests allow.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    signature_ok: bool | None  # None: no secret to check against

    @property
    def key(self) -> str:
        return self.headers.get("Idempotency-Key", "")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """What to do with one request: answer ``status`` after ``delay_s``; ``hold``: wait for
    ``release()`` first; ``drop``: read the request, then close without a word."""

    status: int = 200
    delay_s: float = 0.0
    hold: bool = False
    drop: bool = False
    headers: dict[str, str] = field(default_factory=dict)


OK = Reply()


class Receiver:
    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret
        self.requests: list[Received] = []  # every request that arrived, whole
        self.acked: list[Received] = []  # those answered 2xx, the answer flushed
        self.script: Callable[[Received, int], Reply] = lambda _r, _n: OK
        self._lock = threading.Condition()
        self._released = threading.Event()
        self._released.set()
        self.held = 0  # requests waiting in ``hold`` now
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                receiver._handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/hook"

    def hold(self) -> None:
        """From now on requests scripted ``hold`` wait until ``release``."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, predicate: Callable[[Receiver], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
        return True

    def acked_keys(self) -> list[str]:
        with self._lock:
            return [r.key for r in self.acked]

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length", "0"))
        body = handler.rfile.read(length)
        headers = {k: v for k, v in handler.headers.items()}
        signature_ok = None
        if self.secret is not None:
            expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            given = headers.get("X-Acpctl-Signature", "")
            signature_ok = hmac.compare_digest(expected, given)
        received = Received(handler.path, headers, body, time.time(), signature_ok)
        with self._lock:
            self.requests.append(received)
            number = len(self.requests)
            self._lock.notify_all()
        reply = self.script(received, number)
        if reply.hold:
            with self._lock:
                self.held += 1
                self._lock.notify_all()
            self._released.wait()
            with self._lock:
                self.held -= 1
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.drop:
            handler.close_connection = True
            handler.connection.shutdown(2)  # no status line: the sender sees a dropped connection
            return
        payload = b"ok"
        try:
            handler.send_response(reply.status)
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
            handler.wfile.flush()
        except OSError:  # the sender gave up (its timeout) or died: not acknowledged
            handler.close_connection = True
            return
        if 200 <= reply.status < 300:
            with self._lock:
                self.acked.append(received)
                self._lock.notify_all()


@contextmanager
def receiving(secret: str | None = None) -> Iterator[Receiver]:
    receiver = Receiver(secret)
    try:
        yield receiver
    finally:
        receiver.close()
