"""What the MCP door answers a tool call with: compact JSON, the structured content once.

A tool's `CallToolResult` carries its view (views.py) as `structuredContent` and, for clients that read only text,
one text block that is the same view serialised compactly (no indentation, no spaces). A proxied tool's result is the
backend's own content, structured content and `isError`, as its worker stored them.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent

from mcp_batch.backend_info import ServerInfo
from mcp_batch.models import FAILED_ITEM, TERMINAL_BATCH, BatchDocument, BatchList, ItemPage, ItemStatus
from service.doors.mcp.views import batch_view, item_view, listing_view, servers_view


def compact(value: Any) -> str:
    """JSON without whitespace; non-ASCII text kept as it is (smaller than \\u escapes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _answer(content: dict[str, Any], is_error: bool = False) -> CallToolResult:
    """The content as structured content and, the same, as one compact text block."""
    return CallToolResult(
        content=[TextContent(type="text", text=compact(content))], structured_content=content, is_error=is_error
    )


def document_result(document: BatchDocument, verbose: bool = False) -> CallToolResult:
    """A batch tool's answer: `isError` once the batch has ended with any call failed (every result is in it)."""
    failed = document.status in TERMINAL_BATCH and document.counts.failed > 0
    return _answer(batch_view(document, verbose), is_error=failed)


def item_result(item: ItemPage) -> CallToolResult:
    """The get_item tool's answer: the item (or one page of its content), whole."""
    return _answer(item_view(item))


def listing_result(servers: list[ServerInfo]) -> CallToolResult:
    """The list_servers tool's answer."""
    return _answer(servers_view(servers))


def batches_result(listing: BatchList) -> CallToolResult:
    """The list_batches tool's answer: the page of batches and its `next_cursor`."""
    return _answer(listing_view(listing))


def direct_result(batch_id: str, item: ItemPage) -> CallToolResult:
    """A proxied tool's answer: the backend's own result, or `isError` with why the call did not reach it or end."""
    if item.status in (ItemStatus.ok, ItemStatus.error) and item.content is not None:
        blocks: list[Any] = list(item.content)
        if item.next_cursor is not None:
            note = (
                f"[the content continues: get_item with batch_id {batch_id!r}, item_id {item.id!r} and cursor "
                f"{item.next_cursor!r}]"
            )
            blocks.append({"type": "text", "text": note})
        return CallToolResult.model_validate(
            {"content": blocks, "structuredContent": item.structured_content, "isError": bool(item.is_error)}
        )
    error = item.error.message if item.error is not None else "the call did not finish"
    text = f"{item.status.value}: {error}" if item.status in FAILED_ITEM else f"the call was {item.status.value}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
