"""A tenant's list and its metadata indexes against the real Redis: written with the batch, a refused batch leaves
no entry, a filtered page reads the narrowest index and checks the other pairs, and an expired batch's entries are
dropped as a listing meets them."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from mcp_batch.errors import Backpressure
from mcp_batch.keys import Keys
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from mcp_batch.store.tenant_index import Filters
from tests.mcp_batch.store.stored import batch

KEYS = Keys()


async def _stored(store: Store, **metadata: str) -> str:
    batch_id = new_batch_id()
    await store.submits.create(batch(1, metadata=metadata or None), 4, batch_id=batch_id, jobs=[], tenant="acme")
    return batch_id


async def test_each_pair_has_an_index_scored_as_the_tenants_list(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    batch_id = await _stored(store, job="nightly", team="a")
    created = await redis.zscore(KEYS.tenant_batches("acme"), batch_id)
    assert created is not None
    assert await redis.zscore(KEYS.tenant_metadata("acme", "job", "nightly"), batch_id) == created
    assert await redis.zscore(KEYS.tenant_metadata("acme", "team", "a"), batch_id) == created
    assert await redis.exists(KEYS.tenant_metadata("default", "job", "nightly")) == 0  # per tenant


async def test_a_refused_batch_leaves_no_index_entry(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    with pytest.raises(Backpressure):
        await store.submits.create(
            batch(3, metadata={"job": "nightly"}), 4, jobs=[], tenant="acme", max_unfinished_items=2
        )
    assert await redis.exists(KEYS.tenant_metadata("acme", "job", "nightly")) == 0


async def test_a_filtered_page_keeps_the_batches_with_every_pair(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    both = await _stored(store, job="nightly", team="a")
    await _stored(store, job="nightly", team="b")
    await _stored(store, job="hourly", team="a")
    found, cursor = await store.tenants.batches_of("acme", None, 10, None, Filters({"job": "nightly", "team": "a"}))
    assert [b.id for b in found] == [both] and cursor is None
    assert found[0].metadata == {"job": "nightly", "team": "a"}
    none, _ = await store.tenants.batches_of("acme", None, 10, None, Filters({"job": "weekly"}))
    assert none == []


async def test_an_expired_batch_is_dropped_from_the_index_a_listing_reads(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    kept = await _stored(store, job="nightly")
    expired = await _stored(store, job="nightly")
    await redis.delete(*KEYS.batch_keys(expired))  # as its keys expire
    found, _ = await store.tenants.batches_of("acme", None, 10, None, Filters({"job": "nightly"}))
    assert [b.id for b in found] == [kept]
    assert await redis.zscore(KEYS.tenant_metadata("acme", "job", "nightly"), expired) is None


async def test_the_creation_time_bounds_are_exclusive(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    ids = [await _stored(store) for _ in range(3)]
    scores = [int(await redis.zscore(KEYS.tenant_batches("acme"), i) or 0) for i in ids]
    found, _ = await store.tenants.batches_of("acme", None, 10, None, Filters({}, scores[0], scores[2]))
    assert [b.id for b in found] == [ids[1]]
