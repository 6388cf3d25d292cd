"""One round trip carrying many items (Claims.step) against the real Redis: each record once with its place in
finish order, counts by status, claims given back, the shared unfinished counts kept up on renewal, and the Redis
work per item that the hot path promises."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.store import Store
from mcp_batch.store.claims import Claim
from tests.mcp_batch.store.stored import batch, create, record, take_lease
from tests.redis_server import RedisServer


def finished(claims: list[Claim], status: str = "ok") -> list[tuple[Claim, Any]]:
    return [(claim, record(status)) for claim in claims]


async def test_one_step_records_many_items_each_with_its_seq_and_claims_the_next_ones(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(6))
    first = await store.claims.step(batch_id, job, [], 4)
    assert [c.index for c in first.claims] == [0, 1, 2, 3] and first.more
    assert [c.arguments for c in first.claims] == [{"i": i} for i in range(4)]
    done = [*finished(first.claims[:2]), (first.claims[2], record("error"))]
    second = await store.claims.step(batch_id, job, done, 5)
    assert [c.index for c in second.claims] == [4, 5]  # the cursor's end: fewer than asked for
    raw = await redis.hgetall(Keys().results(batch_id))
    assert {int(k): json.loads(v)["seq"] for k, v in raw.items()} == {0: 1, 1: 2, 2: 3}
    row = await store.reads.row(batch_id)
    assert row.finished == 3 and row.claimed == 6
    assert row.counts["ok"] == 2 and row.counts["error"] == 1
    assert await redis.hkeys(Keys().inflight(batch_id)) == [b"3", b"4", b"5"]
    assert [int(i) for i in await redis.lrange(Keys().finished(batch_id), 0, -1)] == [0, 1, 2]


async def test_a_step_sent_twice_records_nothing_twice(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3))
    claims = (await store.claims.step(batch_id, job, [], 2)).claims
    await store.claims.step(batch_id, job, finished(claims), 0)
    await store.claims.step(batch_id, job, finished(claims), 0)  # its reply was lost: the worker repeats it
    row = await store.reads.row(batch_id)
    assert row.finished == 2 and row.counts["ok"] == 2
    assert await redis.llen(Keys().finished(batch_id)) == 2


async def test_claims_given_back_unrun_go_to_the_next_claimer_with_their_flag(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    claims = (await store.claims.step(batch_id, job, [], 3)).claims
    recovered = Claim(claims[2].index, claims[2].id, "s", "t", {}, recovered=True)  # as a take-over hands it on
    await store.claims.step(batch_id, job, finished(claims[:1]), 0, give_back=[claims[1], recovered])
    again = (await store.claims.step(batch_id, job, [], 3)).claims
    assert [(c.index, c.recovered) for c in again] == [(1, False), (2, True), (3, False)]


async def test_a_halt_returns_no_more_claims_and_the_batch_ends_once_claims_in_hand_come_back(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(5))
    claims = (await store.claims.step(batch_id, job, [], 3)).claims
    await store.leases.cancel(batch_id)
    step = await store.claims.step(batch_id, job, finished(claims[:1], "cancelled"), 2)
    assert not step.more and not step.claims
    assert (await store.reads.row(batch_id)).status == "cancelling"  # two claims are still held
    await store.claims.step(batch_id, job, [], 0, give_back=claims[1:])
    row = await store.reads.row(batch_id)
    assert row.status == "cancelled" and row.orphaned == (1, 2) and row.ended_items == 5


async def test_a_job_whose_lease_was_taken_over_is_told_so(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(3))
    await take_lease(redis, job)
    step = await store.claims.step(batch_id, job, [], 1)
    assert step.lost and not step.more and not step.claims


async def test_the_unfinished_counts_catch_up_on_renewal_and_end_at_zero(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    claims = (await store.claims.step(batch_id, job, [], 4)).claims
    await store.claims.step(batch_id, job, finished(claims[:3]), 0)
    assert await store.submits.unfinished_items() == 4  # not per item: on the lease's renewal
    assert await store.leases.renew(batch_id, job)
    assert await store.submits.unfinished_items() == 1 and await store.submits.unfinished_items("default") == 1
    await store.claims.step(batch_id, job, finished(claims[3:]), 0)
    assert await store.submits.unfinished_items() == 0 and await store.submits.unfinished_items("default") == 0


async def test_an_argument_integer_past_64_bits_is_claimed_exactly(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    request = batch(1).model_copy(update={"calls": [batch(1).calls[0].model_copy(update={"arguments": {"n": 2**70}})]})
    batch_id, (job,) = await create(store, request)
    (claim,) = (await store.claims.step(batch_id, job, [], 1)).claims
    assert claim.arguments == {"n": 2**70} and isinstance(claim.arguments["n"], int)


async def test_eight_items_in_one_step_cost_eight_commands_in_all(own_redis: RedisServer) -> None:
    # A Redis of its own: its command counts are the whole server's, which no other test may add to.
    async with aioredis.Redis.from_url(own_redis.url) as redis:
        store = Store(redis, Keys(), 3600)
        batch_id, (job,) = await create(store, batch(24))
        claims = (await store.claims.step(batch_id, job, [], 8)).claims
        await redis.config_resetstat()
        for _ in range(2):
            claims = (await store.claims.step(batch_id, job, finished(claims), 8)).claims
        stats = await redis.info("commandstats")  # counted exactly: a script's inner commands count too
        calls = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
        calls = {name: count for name, count in calls.items() if not name.startswith(("info", "config"))}
        assert calls.pop("pexpire") == 2  # the results and the finish order, once: the keys were just created
        # Per step: EVALSHA; HMGET and HSET of the batch hash; HDEL and HSET of the in-flight hash; HSET of the results
        # (the items were all in flight, so none has a record to look for); RPUSH of the finish order; LRANGE of the
        # next specs.
        assert calls == {"evalsha": 2, "hmget": 2, "hset": 6, "hdel": 2, "rpush": 2, "lrange": 2}


async def test_an_item_already_recorded_among_new_ones_is_left_as_it_was_and_the_rest_keep_finish_order(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(5))
    claims = (await store.claims.step(batch_id, job, [], 5)).claims
    await store.claims.step(batch_id, job, finished(claims[1:2]), 0)
    again = [*finished(claims[:1]), (claims[1], record("error")), *finished(claims[2:4]), *finished(claims[2:3])]
    await store.claims.step(batch_id, job, again, 0)
    raw = await redis.hgetall(Keys().results(batch_id))
    assert {int(k): (json.loads(v)["seq"], json.loads(v)["status"]) for k, v in raw.items()} == {
        1: (1, "ok"),
        0: (2, "ok"),
        2: (3, "ok"),
        3: (4, "ok"),
    }
    assert [int(i) for i in await redis.lrange(Keys().finished(batch_id), 0, -1)] == [1, 0, 2, 3]
    row = await store.reads.row(batch_id)
    assert row.finished == 4 and row.counts["ok"] == 4 and not row.counts.get("error")
    assert await redis.hkeys(Keys().inflight(batch_id)) == [b"4"]


async def test_failed_items_are_noted_with_their_ids_whatever_else_the_step_carries(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    claims = (await store.claims.step(batch_id, job, [], 4)).claims
    statuses = ["ok", "error", "skipped", "timeout"]
    await store.claims.step(batch_id, job, [(c, record(s)) for c, s in zip(claims, statuses, strict=True)], 0)
    assert await redis.zrange(Keys().failed(batch_id), 0, -1, withscores=True) == [(b"c1", 1.0), (b"c3", 3.0)]
    row = await store.reads.row(batch_id)
    assert row.counts["ok"] == 1 and row.counts["error"] == 1 and row.counts["skipped"] == 1
    assert row.counts["timeout"] == 1 and row.status == "completed"


async def test_an_item_no_longer_in_flight_is_still_recorded_once_in_finish_order(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    claims = (await store.claims.step(batch_id, job, [], 3)).claims
    await store.claims.step(batch_id, job, finished(claims[:1]), 0, give_back=claims[1:2])  # 1 is an orphan now
    await store.claims.step(batch_id, job, [*finished(claims[1:3]), *finished(claims[2:3], "error")], 0)
    raw = await redis.hgetall(Keys().results(batch_id))
    assert {int(k): (json.loads(v)["seq"], json.loads(v)["status"]) for k, v in raw.items()} == {
        0: (1, "ok"),
        1: (2, "ok"),
        2: (3, "ok"),
    }
    assert [int(i) for i in await redis.lrange(Keys().finished(batch_id), 0, -1)] == [0, 1, 2]
    row = await store.reads.row(batch_id)
    assert row.finished == 3 and row.counts["ok"] == 3 and not row.counts.get("error")
    assert await redis.hkeys(Keys().inflight(batch_id)) == []


async def test_claims_past_those_the_job_may_start_are_held_orphans_and_fresh_alike(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(6))
    claims = (await store.claims.step(batch_id, job, [], 3)).claims
    await store.claims.step(batch_id, job, [], 0, give_back=claims[1:2])
    step = await store.claims.step(batch_id, job, finished(claims[:1]), 3, lanes=(1, 2, 0))
    assert [(c.index, c.id, c.arguments) for c in step.claims] == [(i, f"c{i}", {"i": i}) for i in (1, 3, 4)]
    row = await store.reads.row(batch_id)
    assert row.held == {1, 3, 4} and row.busy == 3
    step = await store.claims.step(batch_id, job, [], 1, lanes=(3, 1, 0), held=step.claims[2:])
    assert [c.index for c in step.claims] == [5]
    row = await store.reads.row(batch_id)
    assert row.held == {4, 5} and row.busy == 4


async def test_a_new_batch_hash_begins_with_the_fields_each_step_reads(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, _ = await create(store, batch(3))
    fields = list((await redis.hgetall(Keys().batch(batch_id))).items())[:7]
    assert fields == [
        (b"status", b"queued"),
        (b"total", b"3"),
        (b"claimed", b"0"),
        (b"finished", b"0"),
        (b"on_error", b"continue"),
        (b"orphans", b"0"),
        (b"n:ok", b"0"),
    ]


async def test_a_batch_hash_without_the_orphans_and_ok_counts_is_stepped_alike(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(4))
    await redis.hdel(Keys().batch(batch_id), "orphans", "n:ok")  # as a batch stored before they were written
    claims = (await store.claims.step(batch_id, job, [], 3)).claims
    await store.claims.step(batch_id, job, finished(claims[:1]), 0, give_back=claims[1:2])
    again = (await store.claims.step(batch_id, job, finished(claims[2:3]), 2)).claims
    assert [(c.index, c.recovered) for c in again] == [(1, False), (3, False)]
    await store.claims.step(batch_id, job, finished(again), 0)
    row = await store.reads.row(batch_id)
    assert row.status == "completed" and row.counts["ok"] == 4 and row.finished == 4


def stored_records(raw: dict[bytes, bytes]) -> dict[int, dict[str, Any]]:
    return {int(index): json.loads(value) for index, value in raw.items()}


async def test_records_sent_with_their_seqs_are_stored_as_sent_and_each_step_tells_the_next_seq(
    redis: aioredis.Redis,
) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(12))
    claims = await store.claims.step(batch_id, job, [], 12)
    assert claims.next_seq == 1
    first = await store.claims.step(batch_id, job, finished(claims.claims[:9]), 0, seq=1)
    assert first.next_seq == 10
    second = await store.claims.step(batch_id, job, finished(claims.claims[9:], "error"), 0, seq=10)
    assert second.next_seq is None  # the batch ended
    raw = await redis.hgetall(Keys().results(batch_id))
    assert raw[b"0"] == b'{"status":"ok","content":[],"is_error":false,"seq":1}'
    assert raw[b"11"] == b'{"status":"error","content":[],"is_error":false,"seq":12}'
    assert {index: record["seq"] for index, record in stored_records(raw).items()} == {i: i + 1 for i in range(12)}


async def test_records_sent_with_wrong_seqs_are_stored_with_the_right_ones_whole(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, (job,) = await create(store, batch(12))
    claims = (await store.claims.step(batch_id, job, [], 12)).claims
    # Guessed too high, by a digit more (another job's records would make it too low, as the next step is).
    await store.claims.step(batch_id, job, finished(claims[:3]), 0, seq=98)
    await store.claims.step(batch_id, job, finished(claims[3:9], "error"), 0, seq=1)
    # One already recorded among them: those after it take its seq, not the one sent.
    again = [*finished(claims[9:10]), *finished(claims[8:9]), *finished(claims[10:])]
    step = await store.claims.step(batch_id, job, again, 0, seq=10)
    assert step.next_seq is None
    records = stored_records(await redis.hgetall(Keys().results(batch_id)))
    assert {index: record["seq"] for index, record in records.items()} == {i: i + 1 for i in range(12)}
    assert all(record["status"] == ("error" if 3 <= i < 9 else "ok") for i, record in records.items())
    assert all(record.keys() == {"status", "content", "is_error", "seq"} for record in records.values())
