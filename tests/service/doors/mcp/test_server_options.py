"""The MCP door's tools as users meet them (SDK `Client` over streamable HTTP, raw JSON-RPC to measure bytes): every
batch option REST takes, unknown arguments refused by name, get_item paging, compact output."""

from __future__ import annotations

import json
from typing import Any

import httpx
from mcp import Client
from mcp.types import CallToolResult, TextContent

from tests.service.doors.mcp.wire import call_tool
from tests.support import ServiceHandle

ECHO = {"server": "demo", "tool": "echo", "arguments": {"message": "hi"}}


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def test_unknown_arguments_are_refused_naming_each_and_nothing_runs(
    service: ServiceHandle, client: httpx.AsyncClient
) -> None:
    arguments = {"calls": [ECHO], "bogus": 1, "response_max_byte": 5}
    async with Client(f"{service.base_url}/mcp/") as mcp:
        refused = await mcp.call_tool("call_tools_batch", arguments)
        on_get = await mcp.call_tool("get_batch", {"batch_id": "0" * 32, "offset_": 1})
    assert refused.is_error and "unknown arguments" in text_of(refused)
    assert "- bogus: not an argument" in text_of(refused) and "- response_max_byte: not an argument" in text_of(refused)
    assert on_get.is_error and "- offset_: not an argument" in text_of(on_get)
    assert (await client.get("/v1/batches")).json()["batches"] == []


async def test_the_batch_tools_take_every_option_rest_takes(service: ServiceHandle, client: httpx.AsyncClient) -> None:
    slow = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 5}}
    async with Client(f"{service.base_url}/mcp/") as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        small = await mcp.call_tool("call_tools_batch", {"calls": [ECHO], "response_max_bytes": 5})
        expired = await mcp.call_tool("call_tools_batch", {"calls": [slow], "deadline_seconds": 0.5})
        keyed = {"calls": [ECHO], "idempotency_key": "order-7", "retention_seconds": 120, "verbose": True}
        first, again = await mcp.call_tool("submit_batch", keyed), await mcp.call_tool("submit_batch", keyed)
        hooked = await mcp.call_tool("submit_batch", {"calls": [ECHO], "webhook_url": "https://example.com/hook"})
    for name in ("call_tools_batch", "submit_batch"):
        properties = set(tools[name].input_schema["properties"])
        assert {"response_max_bytes", "deadline_seconds", "retention_seconds", "webhook_url", "idempotency_key"} <= (
            properties
        )
        assert tools[name].input_schema["additionalProperties"] is False
    assert '"@user.emails.0"' in (tools["call_tools_batch"].description or "")  # how references work, by example
    assert small.is_error and "response_max_bytes" in text_of(small)
    assert expired.structured_content is not None and expired.structured_content["counts"]["expired"] == 1
    assert expired.structured_content["results"][0]["status"] == "expired"
    assert first.structured_content is not None and again.structured_content is not None
    assert first.structured_content["id"] == again.structured_content["id"]
    assert first.structured_content["retention_seconds"] == 120
    assert hooked.is_error and "webhook_url" in text_of(hooked)


async def test_get_item_reads_a_truncated_item_whole_page_by_page(service: ServiceHandle) -> None:
    calls = [{"id": "huge", "server": "demo", "tool": "big", "arguments": {"size": 400_000}}, ECHO]
    async with Client(f"{service.base_url}/mcp/") as mcp:
        document = (await mcp.call_tool("call_tools_batch", {"calls": calls})).structured_content
        assert document is not None and document["results"][0]["truncated"] is True
        text, cursor, pages = "", None, 0
        while pages == 0 or cursor is not None:
            arguments = {"batch_id": document["id"], "item_id": "huge"} | ({"cursor": cursor} if cursor else {})
            page = (await mcp.call_tool("get_item", arguments)).structured_content
            assert page is not None and page["id"] == "huge" and page["status"] == "ok"
            text += "".join(block["text"] for block in page["content"])
            cursor, pages = page.get("next_cursor"), pages + 1
        missing = await mcp.call_tool("get_item", {"batch_id": document["id"], "item_id": "nope"})
    assert text == "x" * 400_000 and pages > 1
    assert missing.is_error and "no item with that id" in text_of(missing)


async def test_the_answer_is_compact_json_with_the_document_once_and_no_null_fields(service: ServiceHandle) -> None:
    calls = [{"server": "demo", "tool": "echo", "arguments": {"message": f"message {n}"}} for n in range(300)]
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        reply = await call_tool(http, "call_tools_batch", {"calls": calls}, tasks=False)
    result: dict[str, Any] = reply.result
    document = result["structuredContent"]
    items = len(document["results"])  # what the default budget holds at its minimum share each (292)
    assert document["status"] == "completed" and items >= 290
    [block] = result["content"]
    assert block["text"] == json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    assert all(value is not None for item in document["results"] for value in item.values())
    assert "truncated" not in document["results"][0] and "is_error" not in document["results"][0]
    # Measured on this change, per item of the page: 1,399 bytes on the wire before (the text block pretty-printed,
    # nulls and all), 839 after; the text block alone 774 before, 391 after.
    assert reply.body_bytes / items < 900 and len(block["text"].encode()) / items < 430
