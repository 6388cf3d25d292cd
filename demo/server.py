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

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel

READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)

server = MCPServer(
    "mcp-batch-demo",
    log_level="WARNING",
    instructions="Demo backend for mcp-batch: echo, sleep, fail, big, write.",
)

# Per-process tallies, so a test can ask the backend itself how often a tool ran.
_calls: dict[str, int] = {}
_writes: list[str] = []


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
def stats() -> dict[str, Any]:
    """How many calls and which writes this process has seen (for tests)."""
    return {"calls": dict(_calls), "writes": list(_writes), "pid": os.getpid()}


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
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port, stateless_http=False)


if __name__ == "__main__":
    main()
