"""Calls a stopped worker had at its backend, in a batch that then halts before another worker took them over: they
end with the batch's status, and say that the call may have run and which worker had it (an item surely never sent
says nothing of the kind). Against the real Redis, the store's own scripts."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.contract import document as documents
from mcp_batch.keys import Keys
from mcp_batch.models import ItemResult
from mcp_batch.store import Store
from tests.mcp_batch.store.stored import advance, batch, create, lapse, read_document

WORKER = "host-a:4242"


async def claimed_by_a_worker(store: Store, items: int, claims: int) -> tuple[str, str, list[int]]:
    """A batch whose one job a worker started and claimed `claims` items in."""
    batch_id, (job,) = await create(store, batch(items))
    assert (await store.leases.start(batch_id, job, WORKER)).renewed
    taken = [await advance(store, batch_id, job, None, want_next=True) for _ in range(claims)]
    return batch_id, job, [claim.index for claim in taken if claim is not None]


def said(item: ItemResult | dict[str, Any]) -> tuple[Any, ...]:
    item = item if isinstance(item, dict) else item.model_dump(mode="json", exclude_none=True)
    error = item.get("error") or {}
    return item["status"], error.get("code"), (error.get("details") or {}).get("may_have_run"), item.get("worker")


async def test_calls_in_flight_on_a_stopped_worker_of_a_batch_cancelled_meanwhile_say_they_may_have_run(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, job, held = await claimed_by_a_worker(store, 4, 2)
    assert (await store.leases.cancel(batch_id)).outcome == "cancelling"
    await lapse(redis, job)
    assert await store.leases.take_over(batch_id, job, shards.job_id(batch_id, 0, 1)) == "done"
    document = await read_document(store, batch_id)
    assert document.status == "cancelled" and document.counts.cancelled == 4
    lost, never = ("cancelled", "interrupted", True, WORKER), ("cancelled", None, None, None)
    assert [said(item) for item in document.results] == [lost, lost, never, never]
    assert held == [0, 1] and document.results[0].error is not None
    assert "may or may not have run" in document.results[0].error.message
    row = await store.reads.row(batch_id)
    chunks = [chunk async for chunk in store.reads.finished_since(batch_id, 0, row)]
    streamed = [item for chunk in chunks for item in documents.in_finish_order(row, chunk)]
    assert [said(item) for item in streamed] == [never, never, lost, lost]  # the never-claimed take their seqs first


async def test_calls_taken_from_a_stopped_worker_and_cancelled_before_anyone_ran_them_say_they_may_have_run(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, job, _ = await claimed_by_a_worker(store, 2, 1)
    await lapse(redis, job)
    assert await store.leases.take_over(batch_id, job, shards.job_id(batch_id, 0, 1)) == "replaced"
    assert (await store.leases.cancel(batch_id)).outcome == "ended"  # nothing in flight: the replacement had not run
    results = (await read_document(store, batch_id)).results
    assert [said(item) for item in results] == [
        ("cancelled", "interrupted", True, WORKER),
        ("cancelled", None, None, None),
    ]


async def test_a_call_handed_back_before_it_was_sent_says_nothing_of_having_run(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, job, held = await claimed_by_a_worker(store, 1, 1)
    new_job = shards.job_id(batch_id, 0, 1)
    assert await store.leases.take_over(batch_id, job, new_job, force=True, never_dispatched=held) == "replaced"
    assert (await store.leases.cancel(batch_id)).outcome == "ended"
    assert [said(item) for item in (await read_document(store, batch_id)).results] == [("cancelled", None, None, None)]


async def test_a_claim_a_job_ran_and_still_holds_at_its_release_goes_on_recovered_not_as_never_sent(
    redis: aioredis.Redis,
) -> None:
    # The job's records of items 0 and 1 are gone (a failover promoted a replica they had not reached); it names the
    # write it sent (flag 2) and a claim it had taken over (flag 1), not item 2, whose claim reply it never saw.
    store = Store(redis, Keys(), 3600)
    batch_id, job, held = await claimed_by_a_worker(store, 4, 3)
    assert await store.leases.release(batch_id, job, {0: 2, 1: 1}) == "replaced"
    new_job = shards.job_id(batch_id, 0, 1)
    claims = (await store.claims.step(batch_id, new_job, [], 4)).claims
    assert held == [0, 1, 2] and [(c.index, c.recovered, c.record_lost) for c in claims[:3]] == [
        (0, True, True),
        (1, True, False),
        (2, False, False),
    ]
    assert claims[3].index == 3 and not claims[3].recovered
    assert (await store.reads.row(batch_id)).lost == {0: WORKER, 1: WORKER}  # may have run, and whose they were


async def test_a_claim_given_back_keeps_its_lost_record(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, job, _ = await claimed_by_a_worker(store, 1, 1)
    await store.leases.release(batch_id, job, {0: 2})
    new_job = shards.job_id(batch_id, 0, 1)
    (claim,) = (await store.claims.step(batch_id, new_job, [], 1)).claims
    await store.claims.step(batch_id, new_job, [], 0, give_back=[claim])
    (again,) = (await store.claims.step(batch_id, new_job, [], 1)).claims
    assert (again.index, again.recovered, again.record_lost) == (0, True, True)
