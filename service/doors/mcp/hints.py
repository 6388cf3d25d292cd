"""Tool annotations as true for each caller: a key that may not write lists the batch tools read-only.

A batch runs only read-only tools unless it says `read_only: false`, which a caller without the `write` right may
not say (tenants.py refuses it); for that caller, `call_tools_batch` and `submit_batch` can change nothing, and a
client that asks a person to approve every non-read-only tool would ask for every read. `tools/list` is answered
once for every caller by the SDK, so this middleware rewrites those two tools' annotations on the way out.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.types import ToolAnnotations
from pydantic import BaseModel

from mcp_batch.tenants import Right
from service.auth import current_caller

_RUNNERS = frozenset({"call_tools_batch", "submit_batch"})
# What the batch tools are to a caller who may only read: they run read-only tools on backends outside this service.
READ_ONLY_RUNS = ToolAnnotations(read_only_hint=True, idempotent_hint=False, open_world_hint=True)


def _for_reader(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("name") not in _RUNNERS:
        return tool
    return tool | {"annotations": READ_ONLY_RUNS.model_dump(by_alias=True, exclude_none=True)}


async def caller_hints(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Middleware: the batch tools listed read-only for a caller without `write`."""
    answer = await call_next(ctx)
    if ctx.method != "tools/list" or current_caller.get().may(Right.write):
        return answer
    wire = answer.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(answer, BaseModel) else answer
    if not isinstance(wire, dict) or not isinstance(wire.get("tools"), list):
        return answer
    return wire | {"tools": [_for_reader(tool) for tool in wire["tools"]]}
