"""The proxy door: every backend tool a key may call, listed on the MCP door as `server__tool`.

Turned on by `MCP_BATCH_MCP_PROXY` and, per key, by the keys file's `proxy` right (with auth off, everyone has it).
`tools/list` shows the batch tools, then each visible backend tool with the backend's own input and output schema,
title, description and annotations, read from the tools catalog (Redis), a page of `mcp_proxy_page_size` at a time.
Names are unambiguous: the servers file admits no two servers whose tools could share one (`evil` and `evil__a`),
so each listed name calls the very tool it lists. A key without `write` sees only read-only tools. A `tools/call`
of one runs as a batch of one (`BatchTasks` does it, see tasks.py), so it queues under the backend's limits and
the tenant's share like any batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, Tool, ToolAnnotations

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.servers_file import PROXY_SEPARATOR as SEPARATOR
from mcp_batch.settings import Settings
from mcp_batch.tenants import Caller
from service.application.direct_calls import visible_tools
from service.application.services import Services
from service.auth import current_caller

_CURSOR = "proxy:"


def proxied_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def split_name(name: str, servers: Iterable[str]) -> tuple[str, str] | None:
    """(server, tool) of a proxied name, or None. The servers file admits no two servers a name could belong to
    (servers_file.proxy_clash), so a name listed for one server's tool always comes back to that tool."""
    found = [server for server in servers if name.startswith(server + SEPARATOR)]
    if len(found) != 1:
        return None
    tool = name[len(found[0]) + len(SEPARATOR) :]
    return (found[0], tool) if tool else None


def _listed(server: str, info: ToolInfo) -> Tool:
    return Tool(
        name=proxied_name(server, info.name),
        title=info.title,
        description=info.description,
        input_schema=info.input_schema or {"type": "object"},
        output_schema=info.output_schema,
        annotations=ToolAnnotations.model_validate(info.annotations) if info.annotations else None,
    )


class ProxyTools:
    """Names, listing and dispatch targets of the proxied tools."""

    def __init__(self, services: Callable[[], Services], settings: Settings) -> None:
        self._services = services
        self._page = settings.mcp_proxy_page_size

    def target(self, name: str, caller: Caller) -> tuple[str, str] | None:
        """(server, tool) when `name` is a proxied tool's name for a caller with the proxy right; else None.

        Only the name is read here: whether the key may call that server, the tool exists, and the read-only gate
        lets it run are the batch's own checks (a refused call is a tool error naming why).
        """
        if not caller.proxy or SEPARATOR not in name:
            return None
        return split_name(name, self._services().registry.names)

    async def listing(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: `tools/list` pages through the batch tools, then the proxied ones.

        Every page goes through the SDK's own tools/list first, for its answer as the wire has it on this protocol
        version (result type, server info); the batch tools are kept on the first page, the proxied ones added.
        """
        if ctx.method != "tools/list" or ctx.request_id is None or not current_caller.get().proxy:
            return await call_next(ctx)
        cursor = (ctx.params or {}).get("cursor")
        start = 0 if cursor is None else _offset(cursor)
        wire = await call_next(ctx)
        if not isinstance(wire, dict):
            return wire
        visible = await visible_tools(self._services(), current_caller.get())
        page = [_listed(server, info) for server, info in visible[start : start + self._page]]
        own = list(wire.get("tools") or []) if cursor is None else []
        listed = own + [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in page]
        answer = {key: value for key, value in wire.items() if key != "nextCursor"} | {"tools": listed}
        if start + self._page < len(visible):
            answer["nextCursor"] = f"{_CURSOR}{start + self._page}"
        return answer


def _offset(cursor: Any) -> int:
    digits = cursor[len(_CURSOR) :] if isinstance(cursor, str) and cursor.startswith(_CURSOR) else ""
    if 0 < len(digits) <= 9 and digits.isascii() and digits.isdigit():
        return int(digits)
    raise MCPError(code=INVALID_PARAMS, message="invalid cursor: pass the nextCursor of the last page")
