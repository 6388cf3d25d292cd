"""The shard job's feeder against the real Redis: claims for waiting lanes, read-ahead while calls are fast, records
stored without a lane asking, claims held unrun given back at a halt or the end, and what readers and a take-over
learn of the claims it holds."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.models import BatchStatus, Mode, OnError
from mcp_batch.store import Store
from mcp_batch.store.batch_row import BatchMeta
from mcp_batch.store.claims import Claim
from tests.mcp_batch.store.stored import batch, create, lapse, read_document
from tests.support import eventually, stamps, submit
from worker import feeder as feeder_module
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
    assert feeder.ended  # its last round trip ended the batch


async def test_a_job_that_saw_its_batch_end_closes_without_another_round_trip(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3))
    feeder = Feeder(store.claims, batch_id, job, lanes=3, read_ahead=True)

    async def lane() -> None:  # as a shard's lane: it asks for its next claim as soon as it finishes one
        while (claim := await feeder.next()) is not None:
            feeder.finish(claim, fast())

    await asyncio.gather(*(lane() for _ in range(3)))
    assert feeder.ended  # and the lanes were waiting at its last round trip: the job's marks are set
    assert await redis.hget(Keys().batch(batch_id), f"busy:{job}") is not None
    steps = 0
    step = store.claims.step

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal steps
        steps += 1
        return await step(*args, **kwargs)

    monkeypatch.setattr(store.claims, "step", counted)
    await feeder.close()
    assert steps == 0  # its marks go with its lease's release
    assert await store.leases.release(batch_id, job, ended=True) == "done"
    marks = [k for k in await redis.hkeys(Keys().batch(batch_id)) if k.split(b":")[0] in (b"busy", b"held")]
    assert marks == []


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


async def test_the_last_records_of_a_read_ahead_batch_are_stored_at_once(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feeder_module, "_LINGER", 3600.0)  # a record left to linger would never be stored here
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(12))
    feeder = Feeder(store.claims, batch_id, job, lanes=2, read_ahead=True)
    await run_items(feeder, 11)  # fast calls: read ahead, until the cursor reaches the end
    claim = await feeder.next()
    assert claim is not None
    feeder.finish(claim, fast())
    await eventually(lambda: _status(store, batch_id, "completed"), what="the batch completed", timeout=5)


async def test_claims_held_in_hand_count_as_pending_not_running(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(40))
    feeder = Feeder(store.claims, batch_id, job, lanes=2, read_ahead=True)
    await run_items(feeder, 2)  # the lanes' first calls set the pace: fast, so claims are read ahead
    claim = await _held_beside(store, feeder, batch_id)
    document = await read_document(store, batch_id)
    in_hand = int(await redis.hlen(Keys().inflight(batch_id)))
    assert in_hand > 2  # read ahead: more claimed than the lanes can run
    assert document.counts.running <= 2, document.counts  # at most a call per lane
    assert document.counts.running == 1 and document.counts.pending == 40 - 2 - 1
    statuses = {item.index: item.status for item in document.results}
    assert statuses[claim.index] == "running"
    assert any(statuses[index] == "pending" for index in range(claim.index + 1, 40))
    feeder.finish(claim, fast())
    await feeder.close()


async def test_a_take_over_sends_claims_held_unsent_on_without_the_recovered_flag(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(40))
    feeder = Feeder(store.claims, batch_id, job, lanes=2, read_ahead=True)
    await run_items(feeder, 2)
    claim = await _held_beside(store, feeder, batch_id)  # sent: its call is in flight when the worker dies
    held = (await store.reads.row(batch_id)).held
    # The worker dies (nothing more from this feeder); its lease lapses and a sweep takes the job over.
    await lapse(redis, job)
    new_job = f"{job}-next"
    assert await store.leases.take_over(batch_id, job, new_job) == "replaced"
    step = await store.claims.step(batch_id, new_job, [], 40)
    flags = {again.index: again.recovered for again in step.claims}
    assert flags[claim.index] is True  # it may have reached its backend
    assert held and all(flags[index] is False for index in held)  # never sent
    row = await store.reads.row(batch_id)
    assert not row.held and row.busy is None  # the dead job's marks went with it (the new one told none)


async def test_a_read_ahead_batch_never_shows_more_running_than_its_concurrency(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    batch_id = (await submit(client, stamps("demo", 400), max_concurrency=4))["id"]
    running, in_hand = [], []

    async def ended() -> bool:
        document = (await client.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()
        running.append(document["counts"]["running"])
        in_hand.append(int(await redis.hlen(Keys().inflight(batch_id))))
        return bool(document["status"] == "completed")

    await eventually(ended, what="the batch completed", timeout=60)
    assert max(in_hand) > 4, in_hand  # claims were read ahead: more in hand than can run
    assert max(running) <= 4, running


def test_read_ahead_is_only_for_read_only_concurrent_batches_that_go_on_after_errors() -> None:
    meta = _meta()
    assert reads_ahead(meta)
    assert not reads_ahead(replace(meta, read_only=False))
    assert not reads_ahead(replace(meta, mode=Mode.serial))
    assert not reads_ahead(replace(meta, on_error=OnError.stop))


async def _held_beside(store: Store, feeder: Feeder, batch_id: str) -> Claim:
    """A claim taken by a lane (its call running), once the feeder has told the store of claims it holds unsent."""
    claim = await feeder.next()
    assert claim is not None
    await eventually(lambda: _some_held(store, batch_id), what="claims declared held unsent", timeout=5)
    return claim


async def _some_held(store: Store, batch_id: str) -> bool:
    return bool((await store.reads.row(batch_id)).held)


async def _inflight(redis: aioredis.Redis, batch_id: str, more_than: int) -> bool:
    return int(await redis.hlen(Keys().inflight(batch_id))) > more_than


async def _status(store: Store, batch_id: str, status: str) -> bool:
    return (await store.reads.row(batch_id)).status == status


def _meta() -> BatchMeta:
    return BatchMeta(Mode.concurrent, 8, BatchStatus.queued, True, 0.0, 1, None)


async def test_two_jobs_recording_in_turn_store_every_record_once_with_its_place_in_finish_order(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, jobs = await create(store, batch(60), jobs=2)
    feeders = [Feeder(store.claims, batch_id, job, lanes=3, read_ahead=True) for job in jobs]

    async def lane(feeder: Feeder) -> None:
        while (claim := await feeder.next()) is not None:
            await asyncio.sleep(0)
            feeder.finish(claim, fast())

    await asyncio.gather(*(lane(feeder) for feeder in feeders for _ in range(3)))
    await asyncio.gather(*(feeder.close() for feeder in feeders))
    raw = await redis.hgetall(Keys().results(batch_id))
    order = [int(i) for i in await redis.lrange(Keys().finished(batch_id), 0, -1)]
    assert sorted(order) == list(range(60))
    assert {int(index): json.loads(value)["seq"] for index, value in raw.items()} == {
        index: place + 1 for place, index in enumerate(order)
    }
    assert (await store.reads.row(batch_id)).status == "completed"
