"""Storing a large batch against the real Redis: its calls and ids staged ahead of the batch's step (commands packed
in a worker thread, sent on one connection), all of it or nothing; one not staged, whole in the step's one script."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from mcp_batch.errors import StoredBytesCeiling
from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from mcp_batch.store import Store
from mcp_batch.store.batch_row import load_spec
from mcp_batch.store.intake import STAGE_OVER
from mcp_batch.store.placement import new_batch_id
from tests.mcp_batch.store.test_hash_tables import table

COUNT = STAGE_OVER + 2_345  # staged, in several steps and a last short chunk


def large(count: int = COUNT) -> BatchRequest:
    calls: list[dict[str, object]] = [{"server": "s", "tool": "t", "arguments": {"i": i}} for i in range(count)]
    for i in range(0, count, 7):
        calls[i]["id"] = f"c-{i}-é"  # some named, the rest by their index
    calls[3]["timeout_seconds"] = 2.5
    return BatchRequest.model_validate({"calls": calls})


@pytest.mark.parametrize("count", [COUNT, STAGE_OVER, 1_001])  # staged; the largest not staged; chunks of 1,000
async def test_a_large_batch_is_stored_whole_in_order(redis: aioredis.Redis, count: int) -> None:
    keys, batch_id = Keys(), new_batch_id()
    await Store(redis, keys, 3600).submits.create(large(count), 4, batch_id=batch_id)
    specs = [load_spec(raw) for raw in await redis.lrange(keys.calls(batch_id), 0, -1)]
    assert [s.arguments["i"] for s in specs] == list(range(count))
    assert specs[7].id == "c-7-é" and specs[8].id == "8" and specs[3].timeout_seconds == 2.5
    ids = await redis.hgetall(keys.ids(batch_id))
    assert len(ids) == count and ids["c-7-é".encode()] == b"7" and ids[b"8"] == b"8"
    assert ids[b"1000"] == b"1000"
    assert await redis.object("encoding", keys.ids(batch_id)) == await table(redis)  # written as one from the first
    for key in (keys.batch(batch_id), keys.calls(batch_id), keys.ids(batch_id)):
        assert await redis.ttl(key) > 600  # the batch's life, not the staging's


async def test_a_large_batchs_stored_bytes_are_its_specs(redis: aioredis.Redis) -> None:
    keys, batch_id = Keys(), new_batch_id()
    await Store(redis, keys, 3600).submits.create(large(), 4, batch_id=batch_id, max_stored_bytes=10**9)
    stored = sum(map(len, await redis.lrange(keys.calls(batch_id), 0, -1)))
    assert await redis.hget(keys.tenant_stored_sizes("default"), batch_id) == str(stored).encode()
    assert await redis.get(keys.tenant_stored_bytes("default")) == str(stored).encode()


async def test_a_large_batch_over_the_tenants_ceiling_leaves_nothing(redis: aioredis.Redis) -> None:
    keys, batch_id = Keys(), new_batch_id()
    with pytest.raises(StoredBytesCeiling):
        await Store(redis, keys, 3600).submits.create(large(), 4, batch_id=batch_id, max_stored_bytes=1_000)
    assert not await redis.exists(*keys.batch_keys(batch_id))
    assert not await redis.hexists(keys.tenant_stored_sizes("default"), batch_id)
    assert not await redis.zscore(keys.tenant_stored_until("default"), batch_id)


async def test_a_large_batch_that_fails_halfway_leaves_nothing_and_the_pool_works(redis: aioredis.Redis) -> None:
    keys, batch_id = Keys(), new_batch_id()
    await redis.set(keys.ids(batch_id), "not a hash")  # every HSET of the staging fails
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await Store(redis, keys, 3600).submits.create(large(), 4, batch_id=batch_id)
    assert not await redis.exists(*keys.batch_keys(batch_id))
    for _ in range(20):  # the connection left with unread replies was not given back to the pool
        assert await redis.ping()
