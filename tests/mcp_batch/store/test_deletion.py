"""Deleting a batch in the store against the real Redis: an ended batch goes whole (its keys, its tenant's list and
metadata indexes, its Idempotency-Key, its stored bytes, a pending webhook), a running one is refused unchanged."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis.asyncio as aioredis

from mcp_batch.errors import BatchAlreadyFinished, BatchNotEnded, BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from tests.mcp_batch.store.stored import batch, create

KEYS = Keys()


async def _ended(store: Store, redis: aioredis.Redis, **options: object) -> str:
    """A batch stored with an Idempotency-Key and a webhook, then cancelled before it ran (it ends at once)."""
    held = await store.idempotency.claim("key-1", "fingerprint", "acme")
    batch_id = new_batch_id()
    await store.submits.create(
        batch(2, webhook_url="https://hooks.example.com/x", **options),
        4,
        batch_id=batch_id,
        jobs=[],
        idempotency_key=held.name,
        tenant="acme",
    )
    await store.idempotency.complete(held, batch_id)
    await store.leases.cancel(batch_id)
    assert await redis.zscore(KEYS.webhooks, batch_id) is not None  # its webhook is due
    return batch_id


async def test_an_ended_batch_is_removed_whole(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    kept = await _ended(store, redis, metadata={"job": "nightly"})  # another batch of the tenant, with the same pair
    batch_id = new_batch_id()
    await store.submits.create(batch(1, metadata={"job": "nightly"}), 4, batch_id=batch_id, jobs=[], tenant="acme")
    await store.leases.cancel(batch_id)
    stored_before = int(await redis.get(KEYS.tenant_stored_bytes("acme")) or 0)
    size = int(await redis.hget(KEYS.tenant_stored_sizes("acme"), batch_id) or 0)
    assert size > 0
    await store.deletion.delete(batch_id)
    assert [key for key in KEYS.batch_keys(batch_id) if await redis.exists(key)] == []
    assert await redis.zscore(KEYS.tenant_batches("acme"), batch_id) is None
    assert await redis.zscore(KEYS.tenant_metadata("acme", "job", "nightly"), batch_id) is None
    assert await redis.zscore(KEYS.tenant_metadata("acme", "job", "nightly"), kept) is not None  # the other stays
    assert int(await redis.get(KEYS.tenant_stored_bytes("acme")) or 0) == stored_before - size
    assert await redis.hget(KEYS.tenant_stored_sizes("acme"), batch_id) is None
    assert await redis.zscore(KEYS.tenant_stored_until("acme"), batch_id) is None
    with pytest.raises(BatchNotFound):
        await store.reads.row(batch_id)
    with pytest.raises(BatchNotFound):
        await store.deletion.delete(batch_id)


async def test_its_idempotency_record_and_pending_webhook_go_with_it(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    batch_id = await _ended(store, redis)
    await store.deletion.delete(batch_id)
    assert await redis.exists(KEYS.idempotency("key-1", "acme")) == 0  # the key may make a new batch
    assert await redis.zscore(KEYS.webhooks, batch_id) is None
    assert await store.webhooks.claim(batch_id) is None


async def test_a_batch_that_has_not_ended_is_refused_unchanged(redis: aioredis.Redis) -> None:
    store = Store(redis, KEYS, 3600)
    batch_id, _ = await create(store, batch(2, metadata={"job": "nightly"}))
    before = {key: await redis.dump(key) for key in KEYS.batch_keys(batch_id) if await redis.exists(key)}
    with pytest.raises(BatchNotEnded) as refused:
        await store.deletion.delete(batch_id)
    assert refused.value.status == "queued" and "/cancel" in str(refused.value)
    assert {key: await redis.dump(key) for key in before} == before
    assert await redis.zscore(KEYS.tenant_batches("default"), batch_id) is not None
    assert await redis.zscore(KEYS.tenant_metadata("default", "job", "nightly"), batch_id) is not None


async def _delete_once_ended(store: Store, batch_id: str) -> None:
    """DELETE as a client racing a cancel would: again while the batch has not ended yet."""
    while True:
        try:
            await store.deletion.delete(batch_id)
            return
        except BatchNotEnded:
            await asyncio.sleep(0)


async def _cancel(store: Store, batch_id: str) -> None:
    with contextlib.suppress(BatchNotFound, BatchAlreadyFinished):
        await store.leases.cancel(batch_id)


@pytest.mark.parametrize("planes", ["one node", "two planes"])
async def test_a_delete_racing_a_cancel_leaves_no_count_behind(redis: aioredis.Redis, planes: str) -> None:
    # Two planes: a second client to the same Redis stands for the control plane, so the end is settled in steps.
    control = redis if planes == "one node" else aioredis.Redis(connection_pool=redis.connection_pool)
    store = Store(redis, KEYS, 3600, control=control)
    ids = [new_batch_id() for _ in range(150)]
    for batch_id in ids:
        await store.submits.create(batch(5), 4, batch_id=batch_id, jobs=[], tenant="acme")
    assert int(await redis.get(KEYS.tenant_unfinished("acme")) or 0) == 750
    await asyncio.gather(*(step for i in ids for step in (_cancel(store, i), _delete_once_ended(store, i))))
    assert [i for i in ids if await redis.exists(KEYS.batch(i))] == []
    assert int(await redis.get(KEYS.tenant_unfinished("acme")) or 0) == 0
    assert int(await redis.get(KEYS.unfinished) or 0) == 0


@pytest.mark.parametrize("planes", ["one node", "two planes"])
async def test_a_settle_left_by_a_process_that_settles_in_steps_goes_with_the_delete(
    redis: aioredis.Redis, planes: str
) -> None:
    control = redis if planes == "one node" else aioredis.Redis(connection_pool=redis.connection_pool)
    store = Store(redis, KEYS, 3600, control=control)
    batch_id = new_batch_id()
    await store.submits.create(batch(3), 4, batch_id=batch_id, jobs=[], tenant="acme")
    # Ended as a process whose end is settled in a second step leaves it, before that step ran.
    await redis.hset(KEYS.batch(batch_id), mapping={"status": "cancelled", "counted": 3, "settle": 3})
    await store.deletion.delete(batch_id)
    assert [await redis.get(KEYS.unfinished), await redis.get(KEYS.tenant_unfinished("acme"))] == [b"0", b"0"]
