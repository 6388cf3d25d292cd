"""A backend that talks while it works: `chatty` reports progress and logs a line (`python -m tests.chatty_backend`,
over stdio), for the tests of the worker's progress relay and backend logs. Not part of the installed package.

Kept apart from tests/fault_backend.py: with a tool taking the SDK's `Context` there, that backend's calls could hang
while its tool list was refreshed mid-call (tests/worker/test_calls.py's refresh test), a fault not yet understood.
"""

from __future__ import annotations

import asyncio

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("chatty")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def chatty(ctx: Context, reports: int = 3, hold: float = 0.0, note: str = "") -> str:
    """Report progress `reports` times at once (1 to `reports` of `reports`, saying `note`), log one line, then take
    `hold` seconds."""
    for step in range(1, reports + 1):
        await ctx.report_progress(step, reports, f"{note} {step}".strip())
    await ctx.info(f"chatty reported {reports} times")
    await asyncio.sleep(hold)
    return "said"


if __name__ == "__main__":
    server.run("stdio")
