"""What the MCP door costs a model's context: the tools/list answer and a small batch's answer, in bytes, as the
SDK's `Client` receives them (compact JSON, as a client hands them to its model)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from mcp import Client

from tests.support import ServiceHandle

ECHOES = [{"server": "demo_http", "tool": "echo", "arguments": {"message": m}} for m in ("one", "two", "six")]


def compact_size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


async def test_the_batch_tools_list_in_at_most_twelve_kilobytes(service: ServiceHandle) -> None:
    async with Client(f"{service.base_url}/mcp/") as client:
        listed = await client.list_tools()
    tools = [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in listed.tools]
    size = compact_size({"tools": tools})
    print(f"tools/list: {size} bytes", {t["name"]: compact_size(t) for t in tools})
    assert size <= 12_000


async def test_a_batch_of_three_echoes_answers_in_at_most_five_hundred_bytes_of_text(service: ServiceHandle) -> None:
    async with Client(f"{service.base_url}/mcp/") as client:
        result = await client.call_tool("call_tools_batch", {"calls": ECHOES, "wait_seconds": 30})
    text = "".join(block.text for block in result.content if block.type == "text")
    print(f"3 echoes: {len(text.encode())} bytes", text)
    assert len(text.encode()) <= 500
    assert json.loads(text) == result.structured_content


def nulls(value: object) -> int:
    if isinstance(value, dict):
        return sum(nulls(inner) + (inner is None) for inner in value.values())
    return sum(nulls(inner) for inner in value) if isinstance(value, list) else 0


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["demo_http"] = servers["demo_http"] | {"max_concurrency": 8}  # limits with a field that is not set
    return servers


async def test_verbose_adds_the_options_times_and_each_calls_timings_worker_and_seq(service: ServiceHandle) -> None:
    failing = {"id": "bad", "server": "demo_http", "tool": "fail"}
    async with Client(f"{service.base_url}/mcp/") as client:
        short = await client.call_tool("call_tools_batch", {"calls": [*ECHOES, failing], "wait_seconds": 30})
        batch_id = (short.structured_content or {})["id"]
        long = await client.call_tool("get_batch", {"batch_id": batch_id, "verbose": True})
        one = await client.call_tool("get_item", {"batch_id": batch_id, "item_id": "bad"})
    brief, full = short.structured_content or {}, long.structured_content or {}
    assert brief["failed_ids"] == ["bad"] and set(brief["results"][3]["error"]) == {"code", "message"}
    assert full["limits"]["demo_http"] == {"max_concurrency": 8} and nulls(one.structured_content) == 0
    assert {"mode", "created_at", "finished_at", "max_concurrency"} <= set(full) - set(brief)
    item = full["results"][0]
    assert {"index", "server", "tool", "worker", "seq", "elapsed_seconds", "queued_seconds"} <= set(item)
    assert set(brief["results"][0]) == {"id", "status", "content", "structured_content"}
    assert nulls(brief) == nulls(full) == 0
    assert json.loads(long.content[0].text) == full  # type: ignore[union-attr]


async def test_no_description_names_an_internal_file(service: ServiceHandle) -> None:
    async with Client(f"{service.base_url}/mcp/") as client:
        listed = await client.list_tools()
    text = json.dumps([tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in listed.tools])
    assert re.findall(r"[\w/]+\.py\b", text) == []
