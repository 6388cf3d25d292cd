"""Tasks across API processes and tenants: a task outlives the API process that made it, another tenant's task id
answers as an unknown one, and every task request needs a valid key (raw JSON-RPC over httpx, and the SDK `Client`
for the 401)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.service.doors.mcp.wire import call_tool, cancel_task, get_task
from tests.support import finished, running_api, running_service, running_worker

pytestmark = pytest.mark.timeout(120)

ALPHA, BETA = "mcpb_alpha-key", "mcpb_beta-key"
SLOW = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 2.5}}
NOT_FOUND = {"code": -32602, "message": "Failed to retrieve task: Task not found"}


def as_(base_url: str, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60)


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    keys = [{"sha256": hash_key(ALPHA), "tenant": "alpha"}, {"sha256": hash_key(BETA), "tenant": "beta"}]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    return settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json", "mcp_task_wait_seconds": 1.0})


async def test_a_task_is_answered_by_another_api_process_after_the_first_one_stopped(settings: Settings) -> None:
    settings = settings.model_copy(update={"mcp_task_wait_seconds": 1.0})
    async with running_worker(settings):
        async with running_api(settings) as first, as_(first) as http:
            task_id = (await call_tool(http, "call_tools_batch", {"calls": [SLOW]})).result["taskId"]
        async with running_api(settings) as second, as_(second) as http:
            assert (await get_task(http, task_id)).result["taskId"] == task_id
            await finished(http, task_id)
            done = (await get_task(http, task_id)).result
    assert done["status"] == "completed" and done["result"]["structuredContent"]["id"] == task_id


async def test_another_tenants_task_id_answers_as_an_unknown_one(keyed: Settings) -> None:
    async with running_service(keyed) as service, as_(service.base_url, ALPHA) as alpha:
        task_id = (await call_tool(alpha, "call_tools_batch", {"calls": [SLOW]})).result["taskId"]
        async with as_(service.base_url, BETA) as beta:
            theirs, unknown = await get_task(beta, task_id), await get_task(beta, "0" * 32)
            assert theirs.status == unknown.status == 400 and theirs.error == unknown.error == NOT_FOUND
            assert (await cancel_task(beta, task_id)).result["resultType"] == "complete"  # acked, nothing done
        mine = await finished(alpha, task_id)
        assert mine["status"] == "completed"
        assert (await get_task(alpha, task_id)).result["status"] == "completed"


async def test_every_task_request_needs_a_valid_key(keyed: Settings) -> None:
    async with running_service(keyed) as service:
        for key in (None, "mcpb_not-a-key"):
            async with as_(service.base_url, key) as anonymous:
                reply = await anonymous.post("/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get"})
            assert reply.status_code == 401 and reply.headers["WWW-Authenticate"] == "Bearer"
            assert reply.json()["error"]["code"] == -32001


async def test_the_sdk_client_without_a_key_is_told_so_and_with_one_is_served(keyed: Settings) -> None:
    async with running_service(keyed) as service:
        url = f"{service.base_url}/mcp/"
        with pytest.raises(BaseException) as raised:
            async with Client(url) as client:
                await client.list_tools()
        assert "an API key is required" in _messages(raised.value)
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {ALPHA}"}) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            assert len((await client.list_tools()).tools) == 7


def _messages(exc: BaseException) -> str:
    """Every message in an exception and the groups it holds."""
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(_messages(inner) for inner in exc.exceptions)
    return exc.error.message if isinstance(exc, MCPError) else str(exc)
