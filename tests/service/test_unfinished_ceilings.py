"""The unfinished-item ceilings hold under concurrent submits: a key's `max_unfinished_items` and
MCP_BATCH_MAX_UNFINISHED_ITEMS, at REST, at the Gumloop route and at the MCP proxy door.

Each submit has a connection of its own, opened before the start, and all are released together by one event, so
they reach the API at once: the check of a ceiling and the reservation under it must be one step. No worker runs, so
nothing finishes and every accepted item stays unfinished.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.service.doors.mcp.wire import call_tool
from tests.support import running_api

pytestmark = pytest.mark.timeout(120)

CEILING, SUBMITS = 20, 40
KEY = "mcpb_ceiling-key"
ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}

Send = Callable[[httpx.AsyncClient], Awaitable[httpx.Response | Any]]


async def released_together(base_url: str, send: Send, headers: dict[str, str] | None = None) -> list[Any]:
    """`SUBMITS` requests, each on a connection of its own opened beforehand, sent at the same moment."""
    start = asyncio.Event()
    ready = 0

    async def one(http: httpx.AsyncClient) -> Any:
        nonlocal ready
        assert (await http.get("/healthz")).status_code == 200  # the connection is open before the start
        ready += 1
        if ready == SUBMITS:
            start.set()
        await start.wait()
        return await send(http)

    clients = [httpx.AsyncClient(base_url=base_url, headers=headers or {}, timeout=60) for _ in range(SUBMITS)]
    try:
        return await asyncio.gather(*(one(http) for http in clients))
    finally:
        await asyncio.gather(*(http.aclose() for http in clients))


async def unfinished(redis: aioredis.Redis, tenant: str | None = None) -> int:
    keys = Keys()
    return int(await redis.get(keys.unfinished if tenant is None else keys.tenant_unfinished(tenant)) or 0)


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    entry = {"sha256": hash_key(KEY), "tenant": "capped", "write": True, "max_unfinished_items": CEILING}
    (tmp_path / "keys.json").write_text(json.dumps({"keys": [entry]}))
    return settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json"})


@pytest.fixture
def capped(settings: Settings) -> Settings:
    """Auth off, the service's own ceiling at CEILING; the synchronous doors give up waiting at once."""
    update = {"max_unfinished_items": CEILING, "sync_wait_seconds": 0.1, "mcp_proxy": True, "mcp_task_wait_seconds": 0}
    return settings.model_copy(update=update)


@pytest.fixture
async def keyed_api(keyed: Settings) -> AsyncIterator[str]:
    async with running_api(keyed) as base_url:
        yield base_url


@pytest.fixture
async def capped_api(capped: Settings) -> AsyncIterator[str]:
    async with running_api(capped) as base_url:
        yield base_url


async def post_one_call(http: httpx.AsyncClient) -> httpx.Response:
    return await http.post("/v1/batches", json={"calls": [ECHO]})


async def test_forty_concurrent_submits_against_a_keys_ceiling_of_twenty_accept_exactly_twenty(
    keyed_api: str, redis: aioredis.Redis
) -> None:
    answers = await released_together(keyed_api, post_one_call, {"Authorization": f"Bearer {KEY}"})
    statuses = sorted(response.status_code for response in answers)
    assert statuses == [202] * CEILING + [429] * (SUBMITS - CEILING), statuses
    assert await unfinished(redis, "capped") == CEILING
    refusal = next(response.json()["detail"] for response in answers if response.status_code == 429)
    assert refusal.startswith(f"the tenant has {CEILING} unfinished items and its key allows at most {CEILING}")


async def test_forty_concurrent_submits_against_the_services_ceiling_of_twenty_accept_exactly_twenty(
    capped_api: str, redis: aioredis.Redis
) -> None:
    answers = await released_together(capped_api, post_one_call)
    statuses = sorted(response.status_code for response in answers)
    assert statuses == [202] * CEILING + [429] * (SUBMITS - CEILING), statuses
    assert await unfinished(redis) == CEILING


async def test_forty_concurrent_gumloop_calls_against_a_ceiling_of_twenty_accept_exactly_twenty(
    capped_api: str, redis: aioredis.Redis
) -> None:
    async def gumloop(http: httpx.AsyncClient) -> httpx.Response:
        body = {"calls": [{"server_id": "demo_http", "tool_name": "echo", "arguments": {"message": "hi"}}]}
        return await http.post("/mcp/tools/call", json=body)

    answers = await released_together(capped_api, gumloop)
    statuses = sorted(response.status_code for response in answers)
    # 504: stored and queued, not finished within the (short) wait; 429: refused, nothing stored
    assert statuses == [429] * (SUBMITS - CEILING) + [504] * CEILING, statuses
    assert await unfinished(redis) == CEILING


async def test_forty_concurrent_proxied_calls_against_a_ceiling_of_twenty_accept_exactly_twenty(
    capped_api: str, redis: aioredis.Redis
) -> None:
    async def proxied(http: httpx.AsyncClient) -> Any:
        reply = await call_tool(http, "demo_http__echo", {"message": "hi"})
        assert reply.status == 200, reply.message
        return reply.result

    results = await released_together(capped_api, proxied)
    tasks = [r for r in results if r.get("resultType") == "task"]
    refused = [r for r in results if r.get("isError") and "unfinished items" in r["content"][0]["text"]]
    assert (len(tasks), len(refused)) == (CEILING, SUBMITS - CEILING), results
    assert await unfinished(redis) == CEILING
