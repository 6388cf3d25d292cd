"""The in-repo demo and test backend: a real MCP server with tools for every behaviour the service must handle.

Run it over stdio (`mcp-batch demo-backend`) or streamable HTTP (`mcp-batch demo-backend --transport http --port 9100`).
Tests and benchmarks start it as a real process; nothing here is a mock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)

server = MCPServer(
    "mcp-batch-demo",
    log_level="WARNING",
    instructions="Demo backend for mcp-batch: echo, sleep, fail, big, write.",
)

# Per-process tallies, so a test or benchmark can ask the backend itself what it saw.
_calls: dict[str, int] = {}
_writes: list[str] = []
_arrivals: list[float] = []
_in_flight = {"now": 0, "max": 0}
_refuse = {"count": 0, "retry_after": 1.0}


class Measurement(BaseModel):
    """A structured result: tests read `value` through references and structured_content."""

    name: str
    value: float
    unit: str
    tags: list[str]


@server.tool(annotations=READ)
def echo(message: str = "", data: Any = None) -> str:
    """Return the message unchanged (or the JSON data when given)."""
    _calls["echo"] = _calls.get("echo", 0) + 1
    return message


@server.tool(annotations=READ)
def reflect(data: Any = None) -> dict[str, Any]:
    """Return the data given, as structured content (to see what a call was sent)."""
    return {"data": data}


@server.tool(annotations=READ)
async def sleep(seconds: float = 0.1, tag: str = "") -> str:
    """Sleep without blocking the server, then answer; for long and concurrent work."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}s {tag}".strip()


@server.tool(annotations=READ)
def fail(reason: str = "this tool always fails") -> str:
    """Always answer with isError (the tool's own failure, not a protocol error)."""
    raise ToolError(reason)


@server.tool(annotations=READ)
def big(size: int = 100_000) -> str:
    """Return `size` characters of text, for response budgets and storage caps."""
    return "x" * size


@server.tool(annotations=READ, structured_output=True)
def measure(name: str = "temperature", value: float = 21.5) -> Measurement:
    """Return a structured measurement (structured_content) with a text rendering."""
    return Measurement(name=name, value=value, unit="C", tags=["demo", name])


@server.tool(annotations=WRITE)
def write(key: str, value: str = "") -> str:
    """A write: records the key in this process. Annotated readOnlyHint false."""
    _writes.append(key)
    return f"wrote {key}"


@server.tool(annotations=READ)
async def stamp(seconds: float = 0.0) -> float:
    """Record this call's arrival time (and how many stamp calls are in flight), optionally take `seconds`."""
    arrived = time.time()
    _arrivals.append(arrived)
    _in_flight["now"] += 1
    _in_flight["max"] = max(_in_flight["max"], _in_flight["now"])
    try:
        await asyncio.sleep(seconds)
    finally:
        _in_flight["now"] -= 1
    return arrived


@server.tool(annotations=READ)
def stats(reset: bool = False) -> dict[str, Any]:
    """What this process has seen: calls per tool, writes, stamp arrivals, most stamp calls in flight at once."""
    seen = {
        "calls": dict(_calls),
        "writes": list(_writes),
        "arrivals": list(_arrivals),
        "in_flight_max": _in_flight["max"],
        "pid": os.getpid(),
    }
    if reset:
        _calls.clear()
        _writes.clear()
        _arrivals.clear()
        _in_flight["max"] = _in_flight["now"]
    return seen


@server.tool(annotations=READ)
def refuse_next(count: int = 1, retry_after: float = 1.0) -> str:
    """Over HTTP: answer the next `count` tool calls with 429 and this Retry-After (a backend's own rate limit)."""
    _refuse.update(count=count, retry_after=retry_after)
    return f"refusing the next {count} calls"


class RefuseCalls:
    """ASGI middleware: the 429s that `refuse_next` asks for, before the MCP app sees the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or _refuse["count"] <= 0:
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"tools/call"' in body and b"refuse_next" not in body and _refuse["count"] > 0:
            _refuse["count"] -= 1
            headers = {"Retry-After": f"{_refuse['retry_after']:g}"}
            await PlainTextResponse("slow down", status_code=429, headers=headers)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


class RequireToken:
    """ASGI middleware: 401 to any HTTP request without `Authorization: Bearer <token>` (a backend refusing the
    credentials it was given)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await PlainTextResponse("unauthorized", status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


@server.tool(annotations=READ)
def crash(exit_code: int = 1) -> str:
    """Kill this server process at once, mid-call (a backend that dies)."""
    os._exit(exit_code)


@server.tool(annotations=READ)
async def hang(block: bool = False) -> str:
    """Never answer. With block=true the whole process freezes (a backend that stops responding)."""
    if block:
        while True:
            time.sleep(3600)  # noqa: ASYNC251 - freezing the event loop is the point
    await asyncio.Event().wait()
    return "unreachable"


def main(argv: list[str] | None = None) -> None:
    """Command-line entry: serve over stdio or streamable HTTP."""
    parser = argparse.ArgumentParser(prog="mcp-batch demo-backend", description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--require-token", metavar="TOKEN", help="over HTTP: answer 401 unless `Bearer TOKEN` is sent")
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        app: ASGIApp = RefuseCalls(server.streamable_http_app(host=args.host))
        if args.require_token:
            app = RequireToken(app, args.require_token)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
