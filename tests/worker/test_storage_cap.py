"""A backend's huge result is stored cut to the per-item cap and marked; Redis holds about the cap, not the result."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.redis_server import RedisServer
from tests.support import run_batch

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

CAP = 1024 * 1024  # the default MCP_BATCH_MAX_RESULT_BYTES


@pytest.fixture
def settings(settings: Settings, own_redis: RedisServer) -> Settings:
    """The service on a Redis of its own: the test reads the whole server's memory, which no other test may move."""
    return settings.model_copy(update={"redis_url": own_redis.url})


@pytest.fixture
async def redis(own_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    async with aioredis.Redis.from_url(own_redis.url) as client:
        yield client


async def test_a_five_megabyte_result_is_stored_within_the_cap_and_marked(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    await run_batch(client, [{"server": "demo", "tool": "echo"}])  # the session and its cached tools, before measuring
    used_before = (await redis.info("memory"))["used_memory"]
    calls = [
        {"id": "huge", "server": "demo", "tool": "big", "arguments": {"size": 5_000_000}},
        {"id": "small", "server": "demo", "tool": "big", "arguments": {"size": 1_000}},
    ]
    document = await run_batch(client, calls)
    used_after = (await redis.info("memory"))["used_memory"]
    batch_id = document["id"]
    assert [item["status"] for item in document["results"]] == ["ok", "ok"]

    results = Keys().results(batch_id)
    assert await redis.hstrlen(results, "0") <= CAP
    memory = sum(
        [await redis.memory_usage(key, samples=0) or 0 for key in await redis.keys(f"mcpb:batch:{{{batch_id}}}*")]
    )
    assert memory < 3 * CAP  # the 10 MB record (text and structured content) never reached Redis
    # The whole server, its own bookkeeping included: a loose bound (uncapped, it is ~20x).
    assert used_after - used_before < 5 * CAP

    huge = (await client.get(f"/v1/batches/{batch_id}/items/huge")).json()
    assert huge["stored_truncated"] is True
    assert 8_000_000 < huge["stored_truncated_bytes"] < 10_000_000
    assert huge.get("structured_content") is None
    text = huge["content"][0]["text"]
    while huge.get("next_cursor") is not None:  # the stored part pages as any large item does
        huge = (await client.get(f"/v1/batches/{batch_id}/items/huge", params={"cursor": huge["next_cursor"]})).json()
        text += huge["content"][0]["text"]
    assert CAP - 2_000 < len(text) < CAP and set(text) == {"x"}

    small = (await client.get(f"/v1/batches/{batch_id}/items/small")).json()
    assert (small["stored_truncated"], small["stored_truncated_bytes"]) == (False, 0)
    assert small["content"][0]["text"] == "x" * 1_000
