"""The demo backend: a small real MCP server to try batches against (`mcp-batch dev` runs it).

Run it over stdio (`mcp-batch demo-backend`) or streamable HTTP (`mcp-batch demo-backend --transport http --port 9100`).
The tests' backend (tests/fault_backend.py) adds the tools that crash, hang, garble and fail on demand to this one.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel
from starlette.types import ASGIApp

READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)

server = MCPServer(
    "mcp-batch-demo",
    log_level="WARNING",
    instructions="Demo backend for mcp-batch: echo, sleep, fail, big, write.",
)

# Per-process tallies, read by the tests' `stats` tool (tests/fault_backend.py).
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


def main(argv: list[str] | None = None, wrap: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
    """Command-line entry: serve over stdio or streamable HTTP (`wrap` puts middleware around the HTTP app)."""
    parser = argparse.ArgumentParser(prog="mcp-batch demo-backend", description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="how to serve (default: stdio)")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9100, help="HTTP: the port to listen on (default: 9100)")
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        app: ASGIApp = server.streamable_http_app(host=args.host)
        uvicorn.run(wrap(app) if wrap else app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
