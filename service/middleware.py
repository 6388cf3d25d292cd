"""The app-wide ASGI middlewares (app.py adds them, innermost first): the body limit, Redis failures as 503, and
requests counted by route template.

`BodyLimit` answers 413 before a body over the limit is read whole. A Content-Length over the limit is refused before
the app runs (no byte of the body is read). A body without one (chunked) is counted as it streams to the app; once
the count passes the limit the app's next read fails and the answer is the 413, whatever the app made of the failed
read (FastAPI would say 400, the MCP transport its own error). Every route is covered, the MCP front door included,
since this wraps the app rather than a route.
"""

from __future__ import annotations

import json
import logging

from fastapi.responses import JSONResponse
from redis.exceptions import RedisClusterException, RedisError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_batch.ops.prometheus import UNMATCHED_ROUTE, ApiMetrics
from mcp_batch.store.outage import REDIS_DOWN

logger = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    """The request body ran past the limit; raised into the app by `receive`."""


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413 `{"detail": "request body over N bytes"}`."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self._refusal = json.dumps({"detail": f"request body over {max_bytes} bytes"}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        over = started = refused = False

        async def counted() -> Message:
            nonlocal received, over
            if over:
                raise BodyTooLarge
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    over = True
                    raise BodyTooLarge
            return message

        async def guarded(message: Message) -> None:
            nonlocal started, refused
            if over and not started:  # the app's answer to the failed read is replaced by the 413
                if not refused:
                    refused = True
                    await self._refuse(send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not over or started:  # a failure of its own, or one too late to answer for
                raise
        if over and not started and not refused:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(self._refusal)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": self._refusal})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed Content-Length before the app sees it
    return None


class StorageUnavailable:
    """ASGI middleware: a RedisError becomes 503 `storage unavailable`.

    Not an exception handler: Starlette's handlers cannot act once a response has started, so a streaming response
    (`/results`) that loses Redis halfway would end in a traceback. Here it is cut short instead, without its final
    chunk, so the client sees an incomplete body rather than one that looks whole.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except (RedisError, RedisClusterException) as exc:  # the cluster client's own errors are no RedisError
            if isinstance(exc, REDIS_DOWN):
                logger.warning("Redis unavailable (%s: %s)", type(exc).__name__, exc)
            else:
                logger.error("Redis error: %s", type(exc).__name__, exc_info=exc)
            if started:
                logger.warning(
                    "%s %s cut short: Redis failed after the response started", scope["method"], scope["path"]
                )
                return  # the server drops the connection of a response it did not finish
            response = JSONResponse({"detail": "storage unavailable, try again shortly"}, status_code=503)
            await response(scope, receive, send)


class RequestMetrics:
    """ASGI middleware: counts each answered request under its route's template (`/v1/batches/{batch_id}`), so a
    label never holds an id, and a path no route matches under `_unmatched`."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client gets when the app raises before it answers

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED_ROUTE  # the router sets scope["route"]
            self.metrics.request_answered(route, scope["method"], status)
