"""The tests' backend: the demo backend (demo/server.py) plus the tools a test drives faults with.

Tallies (`stats`), arrivals and calls in flight (`stamp`), invocations that ran twice (`tally`, `tally_write`,
`held_write`, a write that answers once `let_go` names its key; and `a__write`, a read whose name holds the MCP
door's proxy separator), whom a call came as (`whoami`: its Authorization header, or a stdio process's variable), HTTP
statuses on demand (`refuse_next`, `fail_next`), a process that dies (`crash`), garbage on stdout (`garble`), a backend
that stops answering (`hang`), answers full of terminal escapes (`hostile`), and, as command-line options, a token
it requires and a banner before serving; with OTEL_* variables set it exports the MCP SDK's server spans (as
`mcp-batch demo-backend` does). Tests start it as a real process (`python -m tests.fault_backend`); nothing here is
a mock. Not part of the installed package.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from demo import server as demo
from demo.server import READ, WRITE, server
from mcp_batch.ops import tracing

_calls, _writes = demo._calls, demo._writes
_arrivals: list[float] = []
_in_flight = {"now": 0, "max": 0}
_faults: dict[str, Any] = {"count": 0, "status": 429, "retry_after": None}  # what the next tool calls answer (HTTP)
_tallies: dict[str, int] = {}  # invocations per key of `tally` / `tally_write`, so tests see what ran twice
_let_go: dict[str, asyncio.Event] = {}  # per key of `held_write`: set once, by `let_go`, and then for good
_faulted: list[float] = []  # when a call was answered with an injected status
_wire: dict[str, int] = {}  # over stdio: the real stdout, which the SDK hides from tool code
_CONTROL = {"refuse_next", "fail_next", "stats", "let_go"}  # tools a test drives the backend with: never failed


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
async def tally(key: str, seconds: float = 0.0) -> str:
    """A read: count this key's invocations (see `stats`), taking `seconds`."""
    _tallies[key] = _tallies.get(key, 0) + 1
    await asyncio.sleep(seconds)
    return key


@server.tool(annotations=WRITE)
async def tally_write(key: str, seconds: float = 0.0) -> str:
    """A write (not idempotent): count this key's invocations (see `stats`), taking `seconds`."""
    _tallies[key] = _tallies.get(key, 0) + 1
    await asyncio.sleep(seconds)
    return key


@server.tool(annotations=WRITE)
async def held_write(key: str) -> str:
    """A write (not idempotent) that counts this key's invocations (see `stats`) and answers only once `let_go` has
    named the key: a test decides when each call ends. Called again after that, it answers at once."""
    _tallies[key] = _tallies.get(key, 0) + 1
    await _let_go.setdefault(key, asyncio.Event()).wait()
    return key


@server.tool(annotations=READ)
def let_go(keys: list[str]) -> str:
    """Let the `held_write` calls of these keys answer (those waiting now, and any made later)."""
    for key in keys:
        _let_go.setdefault(key, asyncio.Event()).set()
    return f"let go of {len(keys)} keys"


@server.tool(name="a__write", annotations=READ)
def read_named_with_the_separator(key: str) -> str:
    """A read whose name holds the MCP door's proxy separator (`__`): count this key's invocations (see `stats`)."""
    _tallies[key] = _tallies.get(key, 0) + 1
    return f"read {key}"


@server.tool(annotations=READ)
def stats(reset: bool = False) -> dict[str, Any]:
    """What this process has seen: calls per tool, writes, stamp arrivals, most stamp calls in flight at once, and when
    calls were answered with a status that `refuse_next` or `fail_next` asked for."""
    seen = {
        "calls": dict(_calls),
        "writes": list(_writes),
        "arrivals": list(_arrivals),
        "in_flight_max": _in_flight["max"],
        "faulted": list(_faulted),
        "tallies": dict(_tallies),
        "pid": os.getpid(),
    }
    if reset:
        _calls.clear()
        _writes.clear()
        _arrivals.clear()
        _faulted.clear()
        _tallies.clear()
        _in_flight["max"] = _in_flight["now"]
    return seen


@server.tool(annotations=READ)
def refuse_next(count: int = 1, retry_after: float = 1.0) -> str:
    """Over HTTP: answer the next `count` tool calls with 429 and this Retry-After (a backend's own rate limit)."""
    _faults.update(count=count, status=429, retry_after=retry_after)
    return f"refusing the next {count} calls"


@server.tool(annotations=READ)
def fail_next(count: int = 1, status: int = 500) -> str:
    """Over HTTP: answer the next `count` tool calls with this HTTP status (a backend failing for a moment)."""
    _faults.update(count=count, status=status, retry_after=None)
    return f"failing the next {count} calls with HTTP {status}"


def _called_tool(body: bytes) -> str | None:
    """The tool a JSON-RPC request body calls, if it is a tools/call."""
    try:
        message = json.loads(body)
        return str(message["params"]["name"]) if message.get("method") == "tools/call" else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class FailCalls:
    """ASGI middleware: the statuses that `refuse_next` and `fail_next` ask for, before the MCP app sees the call."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or _faults["count"] <= 0:
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        tool = _called_tool(body)
        if tool is not None and tool not in _CONTROL and _faults["count"] > 0:
            _faults["count"] -= 1
            _faulted.append(time.time())
            retry_after = _faults["retry_after"]
            headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
            answer = PlainTextResponse(f"injected HTTP {_faults['status']}", _faults["status"], headers)
            await answer(scope, receive, send)
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
def whoami(ctx: Context, env: str = "TENANT_TOKEN") -> str:
    """Whom the call came as: over HTTP the Authorization header it carried, over stdio this process's variable
    `env` (a tenant's credential, so tests see that each call reaches the backend as its own tenant)."""
    headers = ctx.headers
    if headers is not None:
        return headers.get("authorization", "")
    return os.environ.get(env, "")


@server.tool(annotations=READ)
def noted(text: str = "done", meta_size: int = 0, error_chars: int = 0) -> CallToolResult:
    """Answer with runtime metadata in the result's `_meta` (as tmux's nested tools do), optionally `meta_size`
    characters of it; with `error_chars`, as the tool's own error (isError) explaining itself at that length."""
    meta = {"runtime": {"pane": "%3", "seconds": 0.01}, "padding": "m" * meta_size}
    if error_chars:
        explained = "the tool explains itself: " + "é" * error_chars
        return CallToolResult(content=[TextContent(type="text", text=explained)], is_error=True, _meta=meta)
    return CallToolResult(content=[TextContent(type="text", text=text)], _meta=meta)


# What a hostile backend may answer to put a terminal in its power: clear the screen, retitle the window, colours,
# an 8-bit CSI, a carriage return that overwrites the line, a bidi override that reorders it; a tab and a newline too.
HOSTILE = (
    "clear\x1b[2J title\x1b]0;pwned\x07 \x1b[31mred\x1b[0m csi\x9b2J cr\rover bidi\u202eevil\u202c"
    " del\x7f tab\there\nsecond line"
)


@server.tool(annotations=READ)
def hostile(fail: bool = False) -> CallToolResult:
    """Text (and structured content) full of terminal control sequences; with `fail`, as the tool's own error."""
    return CallToolResult(
        content=[TextContent(type="text", text=HOSTILE)], structured_content={"text": HOSTILE}, is_error=fail
    )


@server.tool(annotations=READ)
def crash(exit_code: int = 1, once: str = "") -> str:
    """Kill this server process at once, mid-call (a backend that dies). With `once` (a file path), only when that
    file does not exist yet, creating it: the call a retry repeats finds a healthy backend."""
    if once:
        marker = Path(once)
        if marker.exists():
            return "still alive"
        marker.touch()
    os._exit(exit_code)


@server.tool(annotations=READ)
def garble(text: str = "this line is not JSON-RPC", binary: bool = False) -> str:
    """Over stdio: write a garbage line on the real stdout, between the server's own messages, and keep serving.
    With `binary`, the line is not even UTF-8."""
    line = b"\xff\xfe\x00garbage\n" if binary else text.replace("\n", " ").encode() + b"\n"
    os.write(_wire.get("stdout", 1), line)
    return "garbled"


@server.tool(annotations=READ)
async def hang(block: bool = False) -> str:
    """Never answer. With block=true the whole process freezes (a backend that stops responding)."""
    if block:
        while True:
            time.sleep(3600)  # noqa: ASYNC251 - freezing the event loop is the point
    await asyncio.Event().wait()
    return "unreachable"


@server.tool(annotations=READ)
def ask_round(ctx: Context, message: str = "Go on?", schema: dict[str, Any] | None = None) -> str | InputRequiredResult:
    """Ask the caller by an `input_required` result (2026-07-28), then say what they answered. `schema`: the
    requestedSchema to send (default: one boolean `go`), however malformed."""
    answer = (ctx.input_responses or {}).get("go")
    if answer is None:
        schema = schema or {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}
        form = ElicitRequestFormParams(message=message, requested_schema=schema)
        return InputRequiredResult(input_requests={"go": ElicitRequest(params=form)})
    if not isinstance(answer, ElicitResult):
        return "answered with something else"
    return f"answered {answer.action}: {json.dumps(answer.content)}"


def main(argv: list[str] | None = None) -> None:
    """Serve like the demo backend, with the test-only options."""
    parser = argparse.ArgumentParser(prog="fault_backend")
    parser.add_argument("--require-token", metavar="TOKEN", help="over HTTP: answer 401 unless `Bearer TOKEN` is sent")
    parser.add_argument(
        "--garbage-stdout", action="store_true", help="over stdio: print a banner (not JSON-RPC) before serving"
    )
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    tracing.configure("fault-backend")  # with OTEL_* set (tests/span_sink.py): the SDK's server spans are exported
    if "--transport" not in rest or "stdio" in rest:
        if args.garbage_stdout:
            print("mcp-batch demo backend starting up", flush=True)
        _wire["stdout"] = os.dup(1)  # the SDK points fd 1 at stderr while it serves; `garble` writes here

    def wrap(app: ASGIApp) -> ASGIApp:
        app = FailCalls(app)
        return RequireToken(app, args.require_token) if args.require_token else app

    demo.main(rest, wrap)


if __name__ == "__main__":
    main()
