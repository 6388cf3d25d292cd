"""The store against the real Redis: atomic creation, exactly-once results, derived item states, leases and
take-overs, cancel, deadlines, retention, backpressure's counter."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.contract import document as documents
from mcp_batch.errors import BatchAlreadyFinished
from mcp_batch.keys import Keys
from mcp_batch.store import Store
from tests.mcp_batch.store.stored import advance, batch, create, lapse, read_document, record, take_lease
from tests.redis_server import RedisServer


async def test_claims_come_in_order_with_their_call_specs(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(2))
    first = await advance(store, batch_id, job, None, want_next=True)
    second = await advance(store, batch_id, job, None, want_next=True)
    assert first is not None and second is not None
    assert (first.index, first.id, first.arguments) == (0, "c0", {"i": 0})
    assert second.index == 1
    assert await advance(store, batch_id, job, None, want_next=True) is None


async def test_a_result_is_counted_once_even_if_stored_twice(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(2))
    claim = await advance(store, batch_id, job, None, want_next=True)
    assert claim is not None
    await advance(store, batch_id, job, (claim, record("error")), want_next=False)
    await advance(store, batch_id, job, (claim, record("ok")), want_next=False)
    document = await read_document(store, batch_id)
    assert document.counts.failed == 1 and document.counts.succeeded == 0
    assert document.results[0].status == "error"
    assert document.results[1].status == "pending" and document.status == "running"


async def test_the_last_result_completes_the_batch(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(1))
    claim = await advance(store, batch_id, job, None, want_next=True)
    assert claim is not None
    assert (await read_document(store, batch_id)).results[0].status == "running"
    assert await advance(store, batch_id, job, (claim, record("ok")), want_next=True) is None
    document = await read_document(store, batch_id)
    assert document.status == "completed" and document.ok and document.finished_at


async def test_a_stopped_batch_completes_when_its_running_items_finish(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(5, on_error="stop"))
    a = await advance(store, batch_id, job, None, want_next=True)
    b = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None and b is not None
    assert await advance(store, batch_id, job, (a, record("error")), want_next=True) is None  # stop: no new claims
    document = await read_document(store, batch_id)
    assert document.status == "running" and document.stopped_at == 0
    assert document.counts.skipped == 3 and document.counts.running == 1
    await advance(store, batch_id, job, (b, record("ok")), want_next=True)
    document = await read_document(store, batch_id)
    assert document.status == "completed"
    assert [r.status for r in document.results] == ["error", "ok", "skipped", "skipped", "skipped"]


async def test_a_failed_create_leaves_nothing(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, jobs = await create(store, batch(3, deadline_seconds=60))
    await store.submits.delete(batch_id, jobs)
    keys = Keys()
    counters = {keys.unfinished, keys.tenant_unfinished("default"), keys.tenant_stored_bytes("default")}
    assert set(await redis.keys("*")) == {c.encode() for c in counters}  # what is left: the counters
    assert [int(await redis.get(c)) for c in counters] == [0, 0, 0]  # back at zero
    assert await store.submits.unfinished_items() == 0 and await store.submits.unfinished_items("default") == 0


async def test_a_lapsed_job_hands_its_in_flight_items_to_one_replacement(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    a = await advance(store, batch_id, job, None, want_next=True)
    b = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None and b is not None
    await advance(store, batch_id, job, (a, record("ok")), want_next=False)
    new_job = shards.job_id(batch_id, 0, 1)
    assert await store.leases.take_over(batch_id, job, new_job) == "alive"  # its lease has not lapsed
    await lapse(redis, job)
    assert await store.leases.take_over(batch_id, job, new_job) == "replaced"
    assert await store.leases.take_over(batch_id, job, new_job) == "gone"  # exactly one replacement
    assert not await store.leases.renew(batch_id, job)  # the old job is fenced off
    assert await advance(store, batch_id, job, None, want_next=True) is None
    recovered = await advance(store, batch_id, new_job, None, want_next=True)
    assert recovered is not None and recovered.index == b.index and recovered.recovered
    fresh = await advance(store, batch_id, new_job, None, want_next=True)
    assert fresh is not None and fresh.index == 2 and not fresh.recovered
    # The old worker was only slow: its late result still counts, once, and the re-run's is dropped.
    await advance(store, batch_id, job, (b, record("ok")), want_next=False)
    await advance(store, batch_id, new_job, (recovered, record("error")), want_next=False)
    document = await read_document(store, batch_id)
    assert document.results[1].status == "ok" and document.counts.succeeded == 2


async def test_a_queued_job_whose_lease_lapses_keeps_it(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(2))
    await redis.zadd(Keys().queue, {job: 1})  # waiting in arq's queue, not in progress
    await lapse(redis, job)
    assert await store.leases.take_over(batch_id, job, shards.job_id(batch_id, 0, 1)) == "queued"
    assert await store.leases.lapsed_jobs() == []


async def test_a_graceful_hand_back_marks_what_never_reached_the_backend(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3))
    a = await advance(store, batch_id, job, None, want_next=True)
    b = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None and b is not None
    new_job = shards.job_id(batch_id, 0, 1)
    outcome = await store.leases.take_over(batch_id, job, new_job, force=True, never_dispatched=[b.index])
    assert outcome == "replaced"
    first = await advance(store, batch_id, new_job, None, want_next=True)
    second = await advance(store, batch_id, new_job, None, want_next=True)
    assert first is not None and second is not None
    assert (first.index, first.recovered, second.index, second.recovered) == (0, True, 1, False)


async def test_cancel_ends_the_batch_once_nothing_is_in_flight(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    a = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None
    assert (await store.leases.cancel(batch_id)).outcome == "cancelling"
    assert await advance(store, batch_id, job, None, want_next=True) is None  # nothing new starts
    document = await read_document(store, batch_id)
    assert document.status == "cancelling" and document.counts.cancelled == 3 and document.counts.running == 1
    await advance(store, batch_id, job, (a, record("ok")), want_next=True)
    document = await read_document(store, batch_id)
    assert document.status == "cancelled" and not document.ok
    assert [r.status for r in document.results] == ["ok", "cancelled", "cancelled", "cancelled"]
    with pytest.raises(BatchAlreadyFinished) as finished:
        await store.leases.cancel(batch_id)
    assert finished.value.status == "cancelled"
    assert await store.submits.unfinished_items() == 0


async def test_a_passed_deadline_expires_what_has_not_run(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3, deadline_seconds=60))
    a = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None
    assert await store.leases.expire(batch_id) == "early"
    await redis.hset(Keys().batch(batch_id), "deadline_at", "1")  # the deadline is now long past
    assert await store.leases.expire(batch_id) == "expiring"  # a call is in flight: its worker cuts it
    await advance(store, batch_id, job, (a, record("expired")), want_next=True)
    document = await read_document(store, batch_id)
    assert document.status == "expired" and [r.status for r in document.results] == ["expired"] * 3
    assert document.counts.expired == 3 and document.counts.failed == 0
    assert await store.leases.due_deadlines() == []


async def test_a_finished_batch_lives_its_own_retention(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(1, retention_seconds=5))
    assert await redis.pttl(Keys().batch(batch_id)) > 3600_000  # alive while unfinished
    a = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None
    await advance(store, batch_id, job, (a, record("ok")), want_next=True)
    await store.leases.renew(batch_id, job)  # a last renewal after the end must not extend it
    for key in Keys().batch_keys(batch_id):
        ttl = await redis.pttl(key)
        assert ttl == -2 or 0 < ttl <= 5000, key  # -2: the key does not exist (no failures, nothing in flight)
    assert (await read_document(store, batch_id)).retention_seconds == 5


async def test_the_unfinished_count_follows_items_and_ends(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3, on_error="stop"))
    assert await store.submits.unfinished_items() == 3
    a = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None
    await advance(store, batch_id, job, (a, record("error")), want_next=True)  # stops: the other two never run
    assert await store.submits.unfinished_items() == 0


async def test_a_claim_lost_with_its_reply_is_run_by_a_replacement_when_the_job_ends(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3))
    a = await advance(store, batch_id, job, None, want_next=True)
    lost = await advance(store, batch_id, job, None, want_next=True)  # Redis claimed it; the reply never arrived
    assert a is not None and lost is not None
    c = await advance(store, batch_id, job, (a, record("ok")), want_next=True)
    assert c is not None
    assert await advance(store, batch_id, job, (c, record("ok")), want_next=True) is None  # nothing left to claim
    assert await store.leases.release(batch_id, job) == "replaced"
    new_job = shards.job_id(batch_id, 0, 1)
    again = await advance(store, batch_id, new_job, None, want_next=True)
    assert again is not None and again.index == lost.index and not again.recovered  # it never reached a backend
    await advance(store, batch_id, new_job, (again, record("ok")), want_next=True)
    assert await store.leases.release(batch_id, new_job) == "done"
    assert (await read_document(store, batch_id)).status == "completed"


async def test_a_job_that_ends_holding_nothing_just_drops_its_lease(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job, other) = await create(store, batch(2), jobs=2)
    a = await advance(store, batch_id, job, None, want_next=True)
    assert a is not None
    await advance(store, batch_id, job, (a, record("ok")), want_next=False)
    assert await store.leases.release(batch_id, job) == "released"
    assert await redis.zscore(Keys().jobs, job) is None and await redis.zscore(Keys().jobs, other) is not None


async def test_a_document_without_a_page_reads_no_calls(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, _ = await create(store, batch(3))
    assert (await read_document(store, batch_id, 0, 0)).results == []


async def test_claimed_items_that_never_finished_take_the_last_seqs_once_the_batch_ends(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(5))
    claims = [await advance(store, batch_id, job, None, want_next=True) for _ in range(3)]
    assert all(claims)
    a, b, c = (claim for claim in claims if claim is not None)
    await advance(store, batch_id, job, (b, record("ok")), want_next=False)
    assert (await store.leases.cancel(batch_id)).outcome == "cancelling"
    await lapse(redis, job)  # its worker died holding a and c: the take-over ends the batch
    assert await store.leases.take_over(batch_id, job, shards.job_id(batch_id, 0, 1)) == "done"
    row = await store.reads.row(batch_id)
    assert row.status == "cancelled" and row.orphaned == (a.index, c.index) and row.ended_items == 5
    chunks = [chunk async for chunk in store.reads.finished_since(batch_id, 0, row)]
    listed = [item for chunk in chunks for item in documents.in_finish_order(row, chunk)]
    # The finished one, then the never-claimed ones in index order, then the claimed ones that never finished.
    assert [(item.get("seq"), item["index"], item["status"]) for item in listed] == [
        (1, 1, "ok"),
        (2, 3, "cancelled"),
        (3, 4, "cancelled"),
        (4, 0, "cancelled"),
        (5, 2, "cancelled"),
    ]
    document = await read_document(store, batch_id)
    assert {item.index: item.seq for item in document.results} == {item["index"]: item.get("seq") for item in listed}


async def test_a_jobs_start_renews_its_lease_names_its_runner_and_reads_its_meta_in_one_script(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3, questions={"policy": "decline"}))
    await redis.hset(Keys().batch(batch_id), f"lease:{job}", 1)  # nearly lapsed
    indexed = await redis.zscore(Keys().jobs, job)
    begun = await store.leases.start(batch_id, job, "host-a:1")
    assert begun.renewed and begun.meta is not None and begun.meta.tenant == "default"
    assert begun.questions is not None and b'"decline"' in begun.questions
    lease = await redis.hmget(Keys().batch(batch_id), [f"lease:{job}", f"runner:{job}"])
    assert int(lease[0] or 0) > 1 and lease[1] == b"host-a:1"
    assert await redis.zscore(Keys().jobs, job) == indexed  # the index stays as the submit set it, a lease ahead
    other_id, (other,) = await create(store, batch(1))
    assert (await store.leases.start(other_id, other, "host-a:1")).questions is None


async def test_a_taken_over_or_gone_jobs_start_is_not_renewed(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(2))
    await take_lease(redis, job)
    assert not (await store.leases.start(batch_id, job, "host-a:1")).renewed
    await redis.delete(Keys().batch(batch_id))
    gone = await store.leases.start(batch_id, job, "host-a:1")
    assert not gone.renewed and gone.meta is None
    assert not await redis.exists(Keys().batch(batch_id))  # nothing written for a batch that is gone


async def test_a_job_that_saw_its_batch_end_releases_without_indexing_a_replacement(own_redis: RedisServer) -> None:
    # A Redis of its own: its command counts are the whole server's, which no other test may add to.
    async with aioredis.Redis.from_url(own_redis.url) as redis:
        store = Store(redis, Keys(), 3600)
        batch_id, (job,) = await create(store, batch(1))
        a = await advance(store, batch_id, job, None, want_next=True)
        assert a is not None
        step = await store.claims.step(batch_id, job, [(a, record("ok"))], 1)
        assert step.ended and not step.more
        await redis.config_resetstat()
        assert await store.leases.release(batch_id, job, ended=True) == "done"
        stats = await redis.info("commandstats")
        assert "cmdstat_zadd" not in stats  # the replacement's index entry, which its end would only take back
        assert await redis.zscore(Keys().jobs, job) is None
        assert await redis.zcard(Keys().jobs) == 0
