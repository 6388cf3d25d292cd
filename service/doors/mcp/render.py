"""What the MCP door answers a tool call with: compact JSON, the structured content once.

A batch tool's `CallToolResult` carries the document as `structuredContent` and, for clients that read only text, one
text block that is the same document serialised compactly (no indentation, no spaces); items leave out the fields
that are at their default (null, and the flags `truncated`, `recovered`, `stored_truncated` and their byte counts
while false and 0), so the output schema still holds. A proxied tool's result is the backend's
own content, structured content and `isError`, as its worker stored them.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent

from mcp_batch.backend_info import ServerInfo
from mcp_batch.models import (
    FAILED_ITEM,
    TERMINAL_BATCH,
    BatchDocument,
    BatchList,
    ItemPage,
    ItemResult,
    ItemStatus,
)


def compact(value: Any) -> str:
    """JSON without whitespace; non-ASCII text kept as it is (smaller than \\u escapes)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _item(item: ItemResult) -> dict[str, Any]:
    return item.model_dump(mode="json", exclude_defaults=True)


def document_content(document: BatchDocument) -> dict[str, Any]:
    """The document as the MCP door's structured content: its items without null fields."""
    content = document.model_dump(mode="json", exclude={"results"})
    content["results"] = [_item(item) for item in document.results]
    return content


def document_result(document: BatchDocument) -> CallToolResult:
    """A batch tool's answer: `isError` once the batch has ended with any call failed (every result is in it)."""
    content = document_content(document)
    failed = document.status in TERMINAL_BATCH and document.counts.failed > 0
    return CallToolResult(
        content=[TextContent(type="text", text=compact(content))], structured_content=content, is_error=failed
    )


def item_result(item: ItemPage) -> CallToolResult:
    """The get_item tool's answer: the item (or one page of its content), compact."""
    content = _item(item)
    return CallToolResult(content=[TextContent(type="text", text=compact(content))], structured_content=content)


def listing_result(servers: list[ServerInfo]) -> CallToolResult:
    """The list_servers tool's answer: `{"result": [...]}` (the SDK's shape for a list), compact."""
    content = {"result": [server.model_dump(mode="json") for server in servers]}
    return CallToolResult(content=[TextContent(type="text", text=compact(content))], structured_content=content)


def batches_result(listing: BatchList) -> CallToolResult:
    """The list_batches tool's answer: the page of batches and its `next_cursor`, compact."""
    content = listing.model_dump(mode="json")
    return CallToolResult(content=[TextContent(type="text", text=compact(content))], structured_content=content)


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
