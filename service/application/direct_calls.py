"""Backend tools called directly, one call at a time (the MCP door's proxy): which tools a caller may see, and one
call run as a batch of one.

A direct call is an ordinary batch whose one call has the id `ONE_CALL_ID`: it is validated, stored, queued and run
by the workers like any other, under its backend's rate and concurrency limits and its tenant's share, and REST shows
it by its id. A caller without the `write` right submits it read-only, so the workers' read-only gate blocks a tool
that is not read-only, exactly as in a batch.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from mcp_batch.backend_info import ToolInfo
from mcp_batch.contract.checks import check_policy
from mcp_batch.models import TERMINAL_BATCH, BatchDocument, BatchRequest, Call, ItemPage
from mcp_batch.tenants import Caller
from service.application import reading, submitting
from service.application.services import Services
from service.application.tool_lists import tools_of

logger = logging.getLogger(__name__)

ONE_CALL_ID = "tools/call"  # the id of a direct call's one item: what tells its batch apart from any other


@dataclass(frozen=True)
class OneCall:
    """A direct call's batch, and its item once the call has finished (None while it runs)."""

    batch_id: str
    item: ItemPage | None


def is_one_call(document: BatchDocument) -> bool:
    """Whether the document (with at least its first item) is a direct call's batch."""
    return document.counts.total == 1 and bool(document.results) and document.results[0].id == ONE_CALL_ID


async def visible_tools(services: Services, caller: Caller) -> list[tuple[str, ToolInfo]]:
    """Every (server, tool) the caller may call directly, from the cached tool lists, in servers-file order.

    Hidden: servers the key may not call, tools the servers file denies, this service's own batch tools, and, for a
    key without `write`, every tool that is not read-only. A backend that cannot be listed adds nothing.
    """
    names = [name for name in services.registry.names if caller.may_call(name)]
    listed = await asyncio.gather(*(tools_of(services, name, caller.tenant) for name in names), return_exceptions=True)
    visible: list[tuple[str, ToolInfo]] = []
    for name, tools in zip(names, listed, strict=True):
        backend = services.registry.get(name)
        if isinstance(tools, BaseException) or backend is None:
            logger.warning("proxy: the tools of %s could not be listed: %s", name, type(tools).__name__)
            continue
        visible += [(name, t) for t in tools if check_policy(t.name, t, backend, not caller.write) is None]
    return visible


async def call_one(
    services: Services, caller: Caller, server: str, tool: str, arguments: dict[str, Any], wait_seconds: float
) -> OneCall:
    """Submit one call as a batch of one and wait up to `wait_seconds` for it to finish."""
    call = Call(id=ONE_CALL_ID, server=server, tool=tool, arguments=arguments)
    submitted = await submitting.submit(services, BatchRequest(calls=[call], read_only=not caller.write), caller)
    return await read_one(services, submitted.batch_id, wait_seconds)


async def read_one(services: Services, batch_id: str, wait_seconds: float = 0, cursor: str | None = None) -> OneCall:
    """A direct call's batch after waiting up to `wait_seconds` for it: its item (one page of it) once finished."""
    await reading.wait(services, batch_id, wait_seconds)
    if (await services.store.reads.row(batch_id)).status not in TERMINAL_BATCH:
        return OneCall(batch_id, None)
    return OneCall(batch_id, await reading.item(services, batch_id, ONE_CALL_ID, cursor))
