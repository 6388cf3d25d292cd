"""The shard job's feeder against the real Redis: claims for waiting lanes, read-ahead while calls are fast, records
stored without a lane asking, and claims held unrun given back at a halt or the end."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.models import BatchStatus, Mode, OnError
from mcp_batch.store import Store
from mcp_batch.store.batch_row import BatchMeta
from tests.mcp_batch.store.stored import batch, create
from tests.support import eventually
from worker.feeder import Feeder, reads_ahead


def fast(status: str = "ok") -> Any:
    return {"status": status, "content": [], "is_error": False, "elapsed_seconds": 0.001}


async def run_items(feeder: Feeder, count: int, elapsed: float = 0.001) -> None:
    """Take `count` claims and finish each as a call of `elapsed` seconds."""
    for _ in range(count):
        claim = await feeder.next()
        assert claim is not None
        feeder.finish(claim, {**fast(), "elapsed_seconds": elapsed})


async def test_lanes_get_every_item_once_and_every_record_is_stored(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(50))
    feeder = Feeder(store.claims, batch_id, job, lanes=4, read_ahead=True)
    seen: list[int] = []

    async def lane() -> None:
        while (claim := await feeder.next()) is not None:
            seen.append(claim.index)
            await asyncio.sleep(0)  # a call that answers at once
            feeder.finish(claim, fast())

    await asyncio.gather(*(lane() for _ in range(4)))
    await feeder.close()
    assert sorted(seen) == list(range(50))
    row = await store.reads.row(batch_id)
    assert row.status == "completed" and row.finished == 50


async def test_fast_calls_are_read_ahead_and_claims_in_hand_go_back_at_the_end(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(40))
    feeder = Feeder(store.claims, batch_id, job, lanes=2, read_ahead=True)
    await run_items(feeder, 2)  # the lanes' first calls set the pace
    claim = await feeder.next()
    assert claim is not None
    await eventually(
        lambda: _inflight(redis, batch_id, more_than=2), what="claims in hand beyond the lane's own", timeout=5
    )
    feeder.finish(claim, fast())
    await feeder.close()
    row = await store.reads.row(batch_id)
    assert row.finished == 3 and await redis.hlen(Keys().inflight(batch_id)) == 0
    again = await store.claims.step(batch_id, job, [], 40)
    assert sorted(c.index for c in again.claims) == list(range(3, 40))  # those given back are claimable again


async def test_slow_calls_are_not_read_ahead(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(40))
    feeder = Feeder(store.claims, batch_id, job, lanes=2, read_ahead=True)
    await run_items(feeder, 4, elapsed=1.0)
    await feeder.next()
    assert await redis.hlen(Keys().inflight(batch_id)) == 1  # only the claim a lane asked for


async def test_a_record_is_stored_soon_though_no_lane_asks_for_more(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(10))
    feeder = Feeder(store.claims, batch_id, job, lanes=8, read_ahead=True)
    claim = await feeder.next()
    assert claim is not None
    feeder.finish(claim, fast())

    async def stored() -> bool:
        return (await store.reads.row(batch_id)).finished == 1

    await eventually(stored, what="the record stored", timeout=5)


async def test_a_cancel_stops_the_lanes_and_ends_the_batch_once_claims_in_hand_are_back(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(30))
    feeder = Feeder(store.claims, batch_id, job, lanes=2, read_ahead=True)
    await run_items(feeder, 3)
    claim = await feeder.next()
    assert claim is not None
    await store.leases.cancel(batch_id)
    feeder.finish(claim, fast("cancelled"))
    # the halt seen, the claims in hand given back
    await eventually(lambda: _status(store, batch_id, "cancelled"), what="the batch cancelled", timeout=5)
    assert await feeder.next() is None
    await feeder.close()


def test_read_ahead_is_only_for_read_only_concurrent_batches_that_go_on_after_errors() -> None:
    meta = _meta()
    assert reads_ahead(meta)
    assert not reads_ahead(replace(meta, read_only=False))
    assert not reads_ahead(replace(meta, mode=Mode.serial))
    assert not reads_ahead(replace(meta, on_error=OnError.stop))


async def _inflight(redis: aioredis.Redis, batch_id: str, more_than: int) -> bool:
    return int(await redis.hlen(Keys().inflight(batch_id))) > more_than


async def _status(store: Store, batch_id: str, status: str) -> bool:
    return (await store.reads.row(batch_id)).status == status


def _meta() -> BatchMeta:
    return BatchMeta(Mode.concurrent, 8, BatchStatus.queued, True, 0.0, 1, None)
