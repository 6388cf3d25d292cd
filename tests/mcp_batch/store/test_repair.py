"""The repair pass against the real Redis: a tenant's count of unfinished items that holds more than its living
batches do is brought down (and the service's with it), a right count and another tenant's are left alone, and a
count that moves while it is read waits for the next pass."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from tests.mcp_batch.store.stored import batch

KEYS = Keys()


async def counts(redis: aioredis.Redis, tenant: str) -> tuple[int, int]:
    tenant_count = int(await redis.get(KEYS.tenant_unfinished(tenant)) or 0)
    return tenant_count, int(await redis.get(KEYS.unfinished) or 0)


async def stored(store: Store, tenant: str, calls: int) -> str:
    batch_id = new_batch_id()
    await store.submits.create(batch(calls), 4, batch_id=batch_id, jobs=[], tenant=tenant)
    return batch_id


async def test_a_leaked_count_is_brought_down_to_what_living_batches_hold(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    await stored(store, "acme", 5)  # living: 5 items still counted
    ended = await stored(store, "acme", 3)
    await store.leases.cancel(ended)  # ended and settled: nothing counted
    await stored(store, "other", 2)
    # 140 items a lost settle left behind: the tenant's and the service's counts both hold them.
    await redis.incrby(KEYS.tenant_unfinished("acme"), 140)
    await redis.incrby(KEYS.unfinished, 140)
    assert await counts(redis, "acme") == (145, 147)
    assert sorted([tenant async for tenant in store.repair.tenants()]) == ["acme", "other"]
    assert await store.repair.every_tenant() == 140
    assert await counts(redis, "acme") == (5, 7) and await counts(redis, "other") == (2, 7)
    assert await store.repair.every_tenant() == 0  # right counts stay as they are


async def test_an_ended_batchs_untaken_settle_is_still_counted(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    batch_id = await stored(store, "acme", 4)
    await redis.hset(KEYS.batch(batch_id), mapping={"status": "cancelled", "settle": 4})  # its settle not yet run
    assert await store.repair.tenant("acme") == 0
    assert await counts(redis, "acme") == (4, 4)


async def test_a_count_that_moves_while_it_is_read_waits_for_the_next_pass(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(redis, KEYS, 3600)
    await redis.set(KEYS.tenant_unfinished("acme"), 9)
    original = store.repair.redis.zrange

    async def submit_meanwhile(*args: object, **kwargs: object) -> object:
        await redis.incrby(KEYS.tenant_unfinished("acme"), 1)  # a submit between the read and the take
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:  # the pass's own read, with a real submit's write slipped in before it
        patched.setattr(store.repair.redis, "zrange", submit_meanwhile)
        assert await store.repair.tenant("acme") == 0
    assert await counts(redis, "acme") == (10, 0)
    assert await store.repair.tenant("acme") == 10


async def test_a_batch_listed_without_its_hash_yet_leaves_the_tenant_to_the_next_pass(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    await redis.set(KEYS.tenant_unfinished("acme"), 6)
    await redis.zadd(KEYS.tenant_batches("acme"), {new_batch_id(): 0})  # long gone: counts nothing
    assert await store.repair.tenant("acme") == 6
    await redis.set(KEYS.tenant_unfinished("acme"), 6)
    await redis.zadd(KEYS.tenant_batches("acme"), {new_batch_id(): time.time() * 1_000_000})  # a submit under way
    assert await store.repair.tenant("acme") == 0
