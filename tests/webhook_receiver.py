"""A real webhook receiver for the tests: an HTTP server in a thread that records every POST."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    answered: int


class Receiver:
    """A real HTTP server in a thread: records every POST and answers the next scripted status (then 200)."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[Received] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.changed:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.requests.append(Received(self.path, dict(self.headers.items()), body, status))
                    receiver.changed.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    async def received(self, count: int, timeout: float = 30) -> list[Received]:
        """Wait until `count` requests have arrived; all of them."""

        def wait() -> bool:
            with self.changed:
                return self.changed.wait_for(lambda: len(self.requests) >= count, timeout)

        assert await asyncio.to_thread(wait), f"{len(self.requests)} of {count} webhook requests arrived"
        return list(self.requests)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(name="receiver")
def webhook_receiver() -> Iterator[Receiver]:
    """`receiver`, one of this test's own (import it into a module to use it there)."""
    receiver = Receiver()
    yield receiver
    receiver.stop()
