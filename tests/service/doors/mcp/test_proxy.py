"""The proxy door: every backend tool as `server__tool` on the MCP door, each call a batch of one through the queue.

Through the real service, worker and backends (the demo backend, and mcp-server-time, which nobody here wrote) over
streamable HTTP: the SDK `Client` for listing and plain calls, raw JSON-RPC over httpx for the task-aware ones.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent, Tool

from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from service.app import create_app
from tests.service.doors.mcp.task_client import Tasks
from tests.service.doors.mcp.wire import call_tool, get_task
from tests.support import (
    HttpBackendProcess,
    ServiceHandle,
    call_backend,
    command_env,
    finished,
    most_in_window,
    run_command,
    running_service,
    settings_env,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

WRITER, READER, PLAIN = "mcpb_writer-key", "mcpb_reader-key", "mcpb_plain-key"
BATCH_TOOLS = {
    "call_tools_batch",
    "submit_batch",
    "get_batch",
    "get_item",
    "list_batches",
    "list_servers",
    "delete_batch",
}


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["limited"] = {"url": fresh_backend.url, "rate_limit": {"per_second": 20, "burst": 4}}
    servers["evil"] = {"url": fresh_backend.url}  # its read-only `a__write` is listed as `evil__a__write`
    servers["time"] = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
    return servers


@pytest.fixture
async def service(settings: Settings, tmp_path: Path) -> AsyncIterator[ServiceHandle]:
    keys = [
        {"sha256": hash_key(WRITER), "tenant": "acme", "proxy": True, "write": True},
        {"sha256": hash_key(READER), "tenant": "acme", "proxy": True},
        {"sha256": hash_key(PLAIN), "tenant": "acme", "write": True},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    update = {
        "auth": "keys",
        "keys": tmp_path / "keys.json",
        "mcp_proxy": True,
        "mcp_proxy_page_size": 4,
        "mcp_task_wait_seconds": 1.0,
        "mcp_task_poll_ms": 100,
    }
    async with running_service(settings.model_copy(update=update)) as handle:
        yield handle


def rest(service: ServiceHandle, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def keyed(key: str) -> httpx2.AsyncClient:
    """The HTTP client the SDK's transport is handed, with the key (a first tools/list may open backends' sessions)."""
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)


def mcp_client(service: ServiceHandle, http: httpx2.AsyncClient, **options: Any) -> Client:
    return Client(streamable_http_client(f"{service.base_url}/mcp/", http_client=http), **options)


async def listed(service: ServiceHandle, key: str) -> tuple[list[Tool], int]:
    """Every tool the key is shown, following nextCursor; and the number of pages."""
    tools: list[Tool] = []
    async with keyed(key) as http, mcp_client(service, http) as c:
        cursor, pages = None, 0
        while pages == 0 or cursor is not None:
            page = await c.list_tools(cursor=cursor)
            tools, cursor, pages = tools + page.tools, page.next_cursor, pages + 1
    return tools, pages


def text_of(content: list[Any]) -> str:
    return "\n".join(block.text for block in content if isinstance(block, TextContent))


async def test_tools_list_pages_through_the_batch_tools_then_every_backend_tool(service: ServiceHandle) -> None:
    tools, pages = await listed(service, WRITER)
    by_name = {tool.name: tool for tool in tools}
    assert len(by_name) == len(tools) and set(by_name) >= BATCH_TOOLS and pages > 2
    async with rest(service, WRITER) as http:
        backends = {server["name"]: server for server in (await http.get("/v1/servers")).json()}
    for server, info in backends.items():
        for tool in info["tools"]:
            shown = by_name[f"{server}__{tool['name']}"]
            assert shown.input_schema == tool["input_schema"] and shown.description == tool["description"]
    echo = by_name["demo__echo"]
    assert echo.annotations is not None and echo.annotations.read_only_hint is True
    assert by_name["time__get_current_time"].output_schema is not None  # the backend's own output schema
    assert "demo__write" in by_name and not any(name.startswith("demo__call_tools") for name in by_name)

    reader = {tool.name for tool in (await listed(service, READER))[0]}
    assert "demo__echo" in reader and "demo__write" not in reader and "limited__tally_write" not in reader
    assert {tool.name for tool in (await listed(service, PLAIN))[0]} == BATCH_TOOLS


async def test_a_proxied_call_is_answered_inline_with_the_backends_own_result(service: ServiceHandle) -> None:
    async with (
        keyed(WRITER) as http,
        mcp_client(service, http) as c,
    ):
        result = await c.call_tool("demo_http__echo", {"message": "hi"})
    assert not result.is_error and text_of(result.content) == "hi" and result.structured_content == {"result": "hi"}
    async with rest(service, WRITER) as http:
        [batch] = (await http.get("/v1/batches")).json()["batches"]  # the call was a batch of one
        item = (await http.get(f"/v1/batches/{batch['id']}")).json()["results"][0]
    assert batch["total"] == 1 and item["id"] == "tools/call" and item["tool"] == "echo"


async def test_a_long_proxied_call_is_a_task_to_a_client_that_takes_tasks(service: ServiceHandle) -> None:
    sleep = {"seconds": 2.5}
    async with rest(service, WRITER) as http:
        created = (await call_tool(http, "demo_http__sleep", sleep)).result
        assert created["resultType"] == "task" and created["status"] == "working"
        await finished(http, created["taskId"])
        done = (await get_task(http, created["taskId"])).result
        waited = (await call_tool(http, "demo_http__sleep", sleep, tasks=False)).result
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "slept 2.5s"
    assert done["result"]["structuredContent"] == {"result": "slept 2.5s"} and done["result"]["isError"] is False
    assert waited["resultType"] == "complete" and waited["content"][0]["text"] == "slept 2.5s"
    tasks = Tasks()
    async with (
        keyed(WRITER) as http,
        mcp_client(service, http, extensions=[tasks]) as c,
    ):
        result = await c.call_tool("demo_http__sleep", sleep)
    assert len(tasks.created) == 1 and text_of(result.content) == "slept 2.5s"


async def test_a_key_without_write_is_held_to_read_only_tools(service: ServiceHandle) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {READER}"}) as http,
        mcp_client(service, http) as c,
    ):
        blocked = await c.call_tool("demo_http__write", {"key": "k"})
        unknown = await c.call_tool("demo_http__nope", {})
    async with (
        keyed(WRITER) as http,
        mcp_client(service, http) as c,
    ):
        written = await c.call_tool("demo_http__write", {"key": "k"})
    assert blocked.is_error and text_of(blocked.content).startswith("blocked: tool 'write' is not read-only")
    assert unknown.is_error and text_of(unknown.content).startswith("unknown_tool:")
    assert not written.is_error and text_of(written.content) == "wrote k"


async def test_fifty_parallel_calls_are_held_to_the_backends_rate_limit(
    service: ServiceHandle, fresh_backend: HttpBackendProcess
) -> None:
    async with rest(service, WRITER) as http:
        replies = await asyncio.gather(*(call_tool(http, "limited__stamp", {}, tasks=False) for _ in range(50)))
    assert all(reply.result["isError"] is False for reply in replies)
    arrivals = (await call_backend(fresh_backend.url, "stats"))["arrivals"]
    # 20/s with bursts of 4, as for a batch: at most 24 in any second (one more for scheduling jitter)
    assert len(arrivals) == 50 and most_in_window(arrivals, 1.0) <= 25
    assert max(arrivals) - min(arrivals) >= (50 - 4) / 20 * 0.95


async def test_mcp_server_time_is_served_through_the_proxy(service: ServiceHandle) -> None:
    async with (
        keyed(WRITER) as http,
        mcp_client(service, http) as c,
    ):
        now = await c.call_tool("time__get_current_time", {"timezone": "UTC"})
        converted = await c.call_tool(
            "time__convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        )
    assert not now.is_error and now.structured_content is not None and now.structured_content["timezone"] == "UTC"
    assert json.loads(text_of(now.content))["datetime"] == now.structured_content["datetime"]
    assert not converted.is_error and converted.structured_content is not None
    assert converted.structured_content["target"]["timezone"] == "Asia/Tokyo"


async def test_a_tool_whose_name_holds_the_separator_is_listed_once_and_runs_on_its_own_server(
    service: ServiceHandle, fresh_backend: HttpBackendProcess
) -> None:
    shown = [tool for tool in (await listed(service, READER))[0] if tool.name == "evil__a__write"]
    assert len(shown) == 1 and shown[0].annotations is not None and shown[0].annotations.read_only_hint is True
    async with keyed(READER) as http, mcp_client(service, http) as c:
        result = await c.call_tool("evil__a__write", {"key": "separated"})
    assert not result.is_error and text_of(result.content) == "read separated"
    assert (await call_backend(fresh_backend.url, "stats"))["tallies"] == {"separated": 1}


async def test_a_servers_file_where_two_servers_could_share_a_proxied_name_stops_the_api_and_the_worker(
    settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "clashing.json"
    clash = {"evil": {"url": "http://127.0.0.1:1/mcp"}, "evil__a": {"command": "x"}}
    path.write_text(json.dumps({"mcpServers": clash}))
    clashing = settings.model_copy(update={"servers": path, "mcp_proxy": True})
    with pytest.raises(ConfigError) as api:
        create_app(clashing)
    code, _, worker = await run_command("worker", env=command_env(**settings_env(clashing)))
    refusal = "servers 'evil' and 'evil__a' cannot both be configured"
    assert refusal in str(api.value) and code != 0 and refusal in worker
