"""The hashes a batch writes by the dozen are hash tables from their first write, and never show the field that made
them one (against the real Redis, whose hash-max-listpack-value decides what a table is)."""

from __future__ import annotations

import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.store import Store
from mcp_batch.store.hash_tables import TABLE_FIELD, TABLE_OVER
from tests.mcp_batch.store.stored import batch, create, record


async def table(redis: aioredis.Redis) -> bytes:
    """The encoding a hash given `TABLE_FIELD` has on this server."""
    value = int((await redis.config_get("hash-max-listpack-value"))["hash-max-listpack-value"])
    return b"hashtable" if len(TABLE_FIELD) > value else b"listpack"


async def test_a_large_batchs_ids_and_in_flight_hashes_are_tables_holding_only_their_entries(
    redis: aioredis.Redis,
) -> None:
    keys = Keys()
    store = Store(redis, keys, 3600)
    batch_id, (job,) = await create(store, batch(TABLE_OVER + 1))
    ids = keys.ids(batch_id)
    assert await redis.object("encoding", ids) == await table(redis)
    assert await redis.hlen(ids) == TABLE_OVER + 1 and not await redis.hexists(ids, TABLE_FIELD)

    first = await store.claims.step(batch_id, job, [], 16)
    inflight = keys.inflight(batch_id)
    assert await redis.object("encoding", inflight) == await table(redis)
    assert sorted(map(int, await redis.hkeys(inflight))) == [claim.index for claim in first.claims]

    # Emptied, the hash is gone; its next claims make a list again, until the step that brings the claims to 64.
    await store.claims.step(batch_id, job, [(claim, record("ok")) for claim in first.claims], 0)
    assert not await redis.exists(inflight)
    second = await store.claims.step(batch_id, job, [], 8)
    assert await redis.object("encoding", inflight) == b"listpack"
    third = await store.claims.step(batch_id, job, [], 39)  # claims 24 to 62
    assert await redis.object("encoding", inflight) == b"listpack"
    await store.claims.step(batch_id, job, [], 1)  # claim 63
    assert await redis.object("encoding", inflight) == await table(redis)
    assert await redis.hlen(inflight) == len(second.claims) + len(third.claims) + 1
    assert not await redis.hexists(inflight, TABLE_FIELD)


async def test_a_small_batchs_hashes_stay_lists(redis: aioredis.Redis) -> None:
    keys = Keys()
    store = Store(redis, keys, 3600)
    batch_id, (job,) = await create(store, batch(TABLE_OVER))
    assert await redis.object("encoding", keys.ids(batch_id)) == b"listpack"
    await store.claims.step(batch_id, job, [], TABLE_OVER)
    assert await redis.object("encoding", keys.inflight(batch_id)) == b"listpack"
    assert await redis.hlen(keys.inflight(batch_id)) == TABLE_OVER
