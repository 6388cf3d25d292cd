"""What a tool answered reaches the caller on every door: its own error text (bounded) in `error.message`, its
content where the door carries content, and its result's `_meta` as the item's `meta` — against the tests' backend
and against server-everything, which nobody here wrote."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from tests.support import ServiceHandle, run_batch
from tests.third_party import everything_stdio

pytestmark = pytest.mark.timeout(90)

LONG = "the tool explains itself: " + "é" * 600
SECRET = "hunter2-argument-value"


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


def mcp_document(result: CallToolResult) -> dict[str, Any]:
    """The document a batch tool of the MCP door answered with (`isError` when a call failed): its structured
    content, else its JSON text."""
    if isinstance(result.structured_content, dict):
        return result.structured_content
    text = "".join(block.text for block in result.content if isinstance(block, TextContent))
    document: dict[str, Any] = json.loads(text)
    return document


async def test_a_tool_error_gives_its_own_first_text_bounded_on_every_door(
    client: httpx.AsyncClient, service: ServiceHandle
) -> None:
    calls = [
        {"id": "short", "server": "demo_http", "tool": "fail"},
        {"id": "long", "server": "demo", "tool": "noted", "arguments": {"error_chars": 600}},
        {"id": "echoing", "server": "demo_http", "tool": "fail", "arguments": {"reason": f"no access for {SECRET}"}},
    ]
    rest = {item["id"]: item for item in (await run_batch(client, calls))["results"]}
    assert rest["short"]["error"]["code"] == "tool_error" and rest["short"]["error"]["type"] == "tool"
    own = "Error executing tool fail: this tool always fails"  # the SDK's servers put their words before the tool's
    assert rest["short"]["error"]["message"] == own
    assert rest["short"]["content"] == [{"type": "text", "text": own}]  # REST keeps the content
    message = rest["long"]["error"]["message"]
    assert len(message) == 500 and LONG.startswith(message[:-1]) and message.endswith("…")
    assert rest["long"]["content"][0]["text"] == LONG
    # An argument the tool repeats is masked in the message (errors never echo arguments); the content has it.
    assert rest["echoing"]["error"]["message"] == "Error executing tool fail: ***"
    assert SECRET in rest["echoing"]["content"][0]["text"]

    async with Client(f"{service.base_url}/mcp/") as mcp:
        answer = await mcp.call_tool("call_tools_batch", {"calls": calls})
    door = {item["id"]: item for item in mcp_document(answer)["results"]}
    assert door["short"]["error"]["message"] == own and door["short"]["content"]
    assert door["long"]["error"]["message"] == message

    gumloop = [
        {"ref": c["id"], "server_id": c["server"], "tool_name": c["tool"], "arguments": c.get("arguments", {})}
        for c in calls
    ]
    response = await client.post("/mcp/tools/call", json={"calls": gumloop})
    results = {r["ref"]: r for r in response.json()["results"]}
    assert results["short"]["status"] == "error" and results["short"]["content"] is None  # success only, as Gumloop
    assert results["short"]["error"]["message"] == own
    assert results["long"]["error"]["message"] == message
    assert SECRET not in response.text


async def test_the_tools_meta_is_kept_per_item_on_every_door(client: httpx.AsyncClient, service: ServiceHandle) -> None:
    calls = [
        {"id": "noted", "server": "demo_http", "tool": "noted"},
        {"id": "plain", "server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}},
    ]
    runtime = {"pane": "%3", "seconds": 0.01}
    rest = {item["id"]: item for item in (await run_batch(client, calls))["results"]}
    assert rest["noted"]["meta"] == {"runtime": runtime, "padding": ""}
    assert rest["plain"].get("meta") is None  # only the protocol's own stamp came: nothing of the tool's
    async with Client(f"{service.base_url}/mcp/") as mcp:
        door = mcp_document(await mcp.call_tool("call_tools_batch", {"calls": calls}))
    assert door["results"][0]["meta"]["runtime"] == runtime
    gumloop = {"calls": [{"ref": "noted", "server_id": "demo_http", "tool_name": "noted"}]}
    (result,) = (await client.post("/mcp/tools/call", json=gumloop)).json()["results"]
    assert result["status"] == "success" and result["meta"]["runtime"] == runtime


async def test_meta_is_bounded_like_content(client: httpx.AsyncClient) -> None:
    calls = [{"id": "huge", "server": "demo_http", "tool": "noted", "arguments": {"meta_size": 5_000}}]
    document = await run_batch(client, calls, response_max_bytes=1024)
    (item,) = document["results"]
    assert item["truncated"] is True and item.get("meta") is None  # too large for its share: left out of this copy
    whole = (await client.get(f"/v1/batches/{document['id']}/items/huge")).json()
    assert len(whole["meta"]["padding"]) == 5_000  # and kept whole in the stored item


async def test_a_third_party_tools_error_text_reaches_the_caller(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "bad", "server": "everything", "tool": "get-resource-reference", "arguments": {"resourceId": 0}},
        {"id": "good", "server": "everything", "tool": "echo", "arguments": {"message": "hi"}},
    ]
    items = {item["id"]: item for item in (await run_batch(client, calls))["results"]}
    assert items["bad"]["status"] == "error" and items["bad"]["error"]["code"] == "tool_error"
    assert items["bad"]["error"]["message"] == "Invalid resourceId: 0. Must be a finite positive integer."
    assert items["good"]["status"] == "ok" and items["good"]["content"][0]["text"] == "Echo: hi"
    assert items["good"].get("meta") is None  # server-everything sends no `_meta` of its own
