"""The MCP front door at /mcp: the SDK client against the running service (real Redis, worker and demo backends)."""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

import httpx
from mcp import Client
from mcp.types import CallToolResult, TextContent

from mcp_batch.settings import Settings
from tests.service.doors.mcp.test_proxy import BATCH_TOOLS
from tests.support import ServiceHandle, running_api

SECRET = "tok-5678-do-not-echo"


def mcp_url(service: ServiceHandle) -> str:
    return f"{service.base_url}/mcp/"


def document(result: CallToolResult, failed: bool = False) -> dict[str, Any]:
    """The batch document a batch tool answered with (its structured content); `isError` only when a call failed."""
    assert result.is_error is failed, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error and result.structured_content is None
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def test_list_tools_shows_the_seven_tools_with_output_schemas_and_annotations(service: ServiceHandle) -> None:
    async with Client(mcp_url(service)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == BATCH_TOOLS
    for tool in tools.values():
        assert tool.description and tool.output_schema and tool.annotations, tool.name
    batch = tools["call_tools_batch"]
    properties = batch.input_schema["properties"]
    assert {"calls", "mode", "on_error", "max_concurrency", "read_only", "wait_seconds"} <= set(properties)
    assert properties["wait_seconds"]["default"] == service.settings.sync_wait_seconds
    assert "read_only (default) runs only read-only tools" in (batch.description or "")
    assert {"id", "status", "results"} <= set((batch.output_schema or {})["properties"])
    hints = {name: tool.annotations for name, tool in tools.items() if tool.annotations is not None}
    runs = hints["call_tools_batch"]
    assert runs.read_only_hint is False and runs.destructive_hint is True and runs.open_world_hint is True
    assert hints["submit_batch"].read_only_hint is False
    assert hints["get_batch"].read_only_hint is True and hints["get_batch"].idempotent_hint is True
    assert hints["list_servers"].read_only_hint is True
    assert hints["delete_batch"].destructive_hint is True and hints["delete_batch"].idempotent_hint is True


async def test_call_tools_batch_runs_calls_on_both_backends_and_returns_the_completed_document(
    service: ServiceHandle,
) -> None:
    calls = [
        {"id": "stdio", "server": "demo", "tool": "echo", "arguments": {"message": "over stdio"}},
        {"id": "http", "server": "demo_http", "tool": "echo", "arguments": {"message": "over http"}},
    ]
    async with Client(mcp_url(service)) as client:
        options = {"calls": calls, "priority": "high", "verbose": True}
        doc = document(await client.call_tool("call_tools_batch", options))
    assert doc["status"] == "completed" and doc["ok"] is True and doc["priority"] == "high"
    items = {item["id"]: item for item in doc["results"]}
    assert items["stdio"]["status"] == "ok" and items["stdio"]["structured_content"] == {"result": "over stdio"}
    assert items["http"]["status"] == "ok" and items["http"]["structured_content"] == {"result": "over http"}


async def test_a_read_only_batch_blocks_write_tools_unless_told_otherwise(service: ServiceHandle) -> None:
    calls = [{"id": "w", "server": "demo", "tool": "write", "arguments": {"key": "k"}}]
    async with Client(mcp_url(service)) as client:
        refused = document(await client.call_tool("call_tools_batch", {"calls": calls}), failed=True)
        allowed = document(await client.call_tool("call_tools_batch", {"calls": calls, "read_only": False}))
    assert refused["status"] == "completed" and refused["results"][0]["status"] == "blocked"
    assert allowed["status"] == "completed" and allowed["results"][0]["status"] == "ok"


async def test_a_slow_batch_comes_back_running_and_its_id_works_with_get_batch(service: ServiceHandle) -> None:
    slow = [{"id": "slow", "server": "demo_http", "tool": "sleep", "arguments": {"seconds": 1}}]
    async with Client(mcp_url(service)) as client:
        first = document(await client.call_tool("call_tools_batch", {"calls": slow, "wait_seconds": 0.05}))
        assert first["status"] in {"queued", "running"} and first["ok"] is False
        async with asyncio.timeout(40):
            done = document(await client.call_tool("get_batch", {"batch_id": first["id"], "wait_seconds": 30}))
    assert done["id"] == first["id"] and done["status"] == "completed" and done["ok"] is True


async def test_submit_batch_answers_at_once_and_get_batch_reads_the_result(service: ServiceHandle) -> None:
    calls = [{"server": "demo", "tool": "echo", "arguments": {"message": f"m{n}"}} for n in range(3)]
    async with Client(mcp_url(service)) as client:
        queued = document(await client.call_tool("submit_batch", {"calls": calls, "mode": "serial", "verbose": True}))
        assert queued["mode"] == "serial" and queued["counts"]["total"] == 3
        async with asyncio.timeout(40):
            args = {"batch_id": queued["id"], "wait_seconds": 30, "offset": 1, "limit": 1}
            page = document(await client.call_tool("get_batch", args))
    assert page["status"] == "completed" and page["results_offset"] == 1
    assert [item["structured_content"] for item in page["results"]] == [{"result": "m1"}]


async def test_list_servers_shows_what_get_v1_servers_shows(service: ServiceHandle, client: httpx.AsyncClient) -> None:
    async with Client(mcp_url(service)) as mcp:
        result = await mcp.call_tool("list_servers", {})
    assert not result.is_error and isinstance(result.structured_content, dict)
    listed = {server["name"]: server for server in result.structured_content["result"]}
    rest = {server["name"]: server for server in (await client.get("/v1/servers")).json()}
    assert set(listed) == set(rest) == {"demo", "demo_http", "quick"}
    assert listed["demo_http"]["transport"] == "http"
    tools = {tool["name"]: tool for tool in listed["demo"]["tools"]}
    assert tools["echo"]["annotations"]["readOnlyHint"] is True


async def test_a_malformed_batch_is_a_tool_error_naming_each_problem_but_no_value(service: ServiceHandle) -> None:
    calls = [
        {"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": SECRET}},
        {"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": SECRET}},
    ]
    async with Client(mcp_url(service)) as client:
        text = error_text(await client.call_tool("call_tools_batch", {"calls": calls}))
    assert "calls.1.id: duplicate id" in text
    assert SECRET not in text


async def test_arguments_outside_the_schema_are_named_but_never_echoed(service: ServiceHandle) -> None:
    calls = [{"server": "demo", "tool": "echo", "args": {"token": SECRET}}]
    async with Client(mcp_url(service)) as client:
        text = error_text(await client.call_tool("submit_batch", {"calls": calls, "mode": SECRET}))
    assert "calls.0.args" in text and "mode" in text
    assert SECRET not in text


async def test_get_batch_of_an_unknown_id_is_a_tool_error(service: ServiceHandle) -> None:
    async with Client(mcp_url(service)) as client:
        text = error_text(await client.call_tool("get_batch", {"batch_id": "no-such-batch"}))
    assert "no batch with that id" in text


async def test_the_endpoint_answers_without_the_slash_and_under_a_listed_host_name(settings: Settings) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Host": "batches.example.com", "Accept": "application/json, text/event-stream"}
    listed = settings.model_copy(update={"allowed_hosts": ["batches.example.com"]})
    async with running_api(listed) as base_url:
        async with Client(f"{base_url}/mcp") as client:
            assert len((await client.list_tools()).tools) == 7
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            response = await http.post("/mcp/", json=initialize, headers=headers)
    assert response.status_code == 200, response.text
    assert '"serverInfo"' in response.text


async def test_the_door_gives_the_package_s_version_in_its_server_info(service: ServiceHandle) -> None:
    async with Client(mcp_url(service)) as client:
        info = client.server_info
    assert info is not None and info.name == "mcp-batch"
    assert info.version == importlib.metadata.version("mcp-batch") and info.version


async def test_batch_tools_take_metadata_and_delete_batch_deletes_an_ended_batch(service: ServiceHandle) -> None:
    calls = [{"server": "demo", "tool": "echo", "arguments": {"message": "m"}}]
    slow = [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}]
    async with Client(mcp_url(service)) as client:
        tagged = {"calls": calls, "metadata": {"job": "nightly"}, "verbose": True}
        done = document(await client.call_tool("call_tools_batch", tagged))
        assert done["status"] == "completed" and done["metadata"] == {"job": "nightly"}
        too_long = {"calls": calls, "metadata": {"job": "x" * 513}}
        assert "metadata.job: a value is at most 512" in error_text(await client.call_tool("submit_batch", too_long))
        running = document(await client.call_tool("submit_batch", {"calls": slow}))
        refused = error_text(await client.call_tool("delete_batch", {"batch_id": running["id"]}))
        assert "only an ended batch can be deleted" in refused and "/cancel" in refused
        deleted = await client.call_tool("delete_batch", {"batch_id": done["id"]})
        assert not deleted.is_error and deleted.structured_content == {"id": done["id"], "deleted": True}
        gone = error_text(await client.call_tool("get_batch", {"batch_id": done["id"]}))
        assert "no batch with that id" in gone
        assert "no batch with that id" in error_text(await client.call_tool("delete_batch", {"batch_id": done["id"]}))
