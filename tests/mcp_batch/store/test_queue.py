"""The queue's own scripts against arq's: a job it queues is the job arq's `enqueue_job` queues (the same keys, the same
serialized job, the same life and score), so arq's worker reads it as its own, and a job a worker picks is in progress
as arq marks it. These fail if arq's job layout changes under the pin in pyproject.toml."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from arq import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import Job, JobStatus, deserialize_job_raw
from arq.utils import timestamp_ms

from mcp_batch.keys import Keys
from mcp_batch.store.queue import JOB_FUNCTION, JobPick, JobQueue
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(30)


def arq_pool(redis: aioredis.Redis) -> ArqRedis:
    return ArqRedis(redis.connection_pool, default_queue_name=Keys().queue)


async def stored_job(pool: ArqRedis, queue: str, job: str) -> tuple[tuple[object, ...], float, int]:
    """What a queued job is in Redis: its deserialized body (function, args, kwargs, try; not its time), its score
    and the life left on its key (ms)."""
    raw = await pool.get(job_key_prefix + job)
    assert raw is not None, f"no job {job}"
    function, args, kwargs, job_try, _enqueued = deserialize_job_raw(raw)
    score = await pool.zscore(queue, job)
    assert score is not None
    return (function, args, kwargs, job_try), score, await pool.pttl(job_key_prefix + job)


async def test_a_queued_job_is_what_arqs_enqueue_job_writes(redis: aioredis.Redis) -> None:
    pool, keys = arq_pool(redis), Keys()
    queue = JobQueue(pool, keys)
    await queue.enqueue("b1", 0, "b1:0:0", generation=0)
    await pool.enqueue_job(JOB_FUNCTION, "b2", 0, 0, _job_id="b2:0:0", _queue_name=keys.queue)
    ours, our_score, our_life = await stored_job(pool, keys.queue, "b1:0:0")
    theirs, their_score, their_life = await stored_job(pool, keys.queue, "b2:0:0")
    assert ours == (JOB_FUNCTION, ("b1", 0, 0), {}, None)
    assert theirs == (JOB_FUNCTION, ("b2", 0, 0), {}, None)
    assert abs(our_score - their_score) < 5_000 and abs(our_life - their_life) < 5_000
    info = await Job("b1:0:0", pool, _queue_name=keys.queue).info()  # arq's own reader of a queued job
    assert info is not None and info.function == JOB_FUNCTION and info.args == ("b1", 0, 0)
    assert await Job("b1:0:0", pool, _queue_name=keys.queue).status() is JobStatus.queued


async def queue_order(pool: ArqRedis, keys: Keys) -> list[str]:
    return [job.decode() for job in await pool.zrange(keys.queue, 0, -1)]


async def test_a_tenants_jobs_take_turns_with_anothers_instead_of_waiting_behind_its_backlog(
    redis: aioredis.Redis,
) -> None:
    pool, keys = arq_pool(redis), Keys()
    queue = JobQueue(pool, keys)
    for n in range(4):
        await queue.enqueue_and_wake(f"a{n}", [f"a{n}:0:0"], "alpha")
    await queue.enqueue_and_wake("b0", ["b0:0:0", "b0:1:0"], "beta")
    await queue.enqueue_and_wake("b1", ["b1:0:0"], "beta")
    assert await queue_order(pool, keys) == ["a0:0:0", "b0:0:0", "a1:0:0", "b0:1:0", "a2:0:0", "b1:0:0", "a3:0:0"]
    _, score, life = await stored_job(pool, keys.queue, "b1:0:0")
    assert score <= timestamp_ms() and life > pool.expires_extra_ms - 5_000  # due at once, kept as arq keeps it


async def test_a_job_taken_over_goes_next_to_the_head(redis: aioredis.Redis) -> None:
    pool, keys = arq_pool(redis), Keys()
    queue = JobQueue(pool, keys)
    await queue.enqueue_and_wake("a0", ["a0:0:0", "a0:1:0", "a0:2:0"], "alpha")
    await queue.enqueue("b0", 0, "b0:0:1", 1)
    assert (await queue_order(pool, keys))[:2] == ["a0:0:0", "b0:0:1"]


async def test_a_job_id_already_queued_or_with_a_result_is_not_queued_again(redis: aioredis.Redis) -> None:
    pool, keys = arq_pool(redis), Keys()
    queue = JobQueue(pool, keys)
    await queue.enqueue("b1", 0, "b1:0:0")
    before = await pool.get(job_key_prefix + "b1:0:0")
    await queue.enqueue("b1", 0, "b1:0:0", 1)
    assert await pool.get(job_key_prefix + "b1:0:0") == before
    await pool.set(result_key_prefix + "b2:0:0", b"done")
    await queue.enqueue("b2", 0, "b2:0:0")
    assert await pool.zscore(keys.queue, "b2:0:0") is None


async def test_a_new_batchs_jobs_and_their_wake_go_in_one_round_trip(own_redis: RedisServer) -> None:
    keys = Keys()
    async with aioredis.Redis.from_url(own_redis.url) as redis, redis.pubsub() as pubsub:
        pool = arq_pool(redis)
        await pubsub.subscribe(keys.wake_channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        queue = JobQueue(pool, keys)
        await queue.enqueue_and_wake("b0", ["b0:0:0"], "t")  # the first sends the script: Redis had not seen it
        assert (await pubsub.get_message(ignore_subscribe_messages=True, timeout=5) or {}).get("data") == b"b0"
        await redis.config_resetstat()
        await queue.enqueue_and_wake("b1", ["b1:0:0", "b1:1:0"], "t")
        stats = await redis.info("commandstats")
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
        assert message is not None and message["data"] == b"b1"
        sent = {name.removeprefix("cmdstat_"): row["calls"] for name, row in stats.items()}
        # the script's own commands count too; what the client sent is the one EVALSHA
        assert sent.pop("evalsha") == 1 and set(sent) <= {
            "exists",
            "psetex",
            "zadd",
            "publish",
            "config|resetstat",
            "zrange",  # the queue's head and the tenant's turn
            "hget",
            "hset",
        }
        assert await pool.zrange(keys.queue, 0, -1) == [b"b0:0:0", b"b1:0:0", b"b1:1:0"]
        for shard in (0, 1):
            info = await Job(f"b1:{shard}:0", pool, _queue_name=keys.queue).info()
            assert info is not None and info.args == ("b1", shard)


async def test_queueing_survives_a_script_flush(own_redis: RedisServer) -> None:
    keys = Keys()
    async with aioredis.Redis.from_url(own_redis.url) as redis:
        pool = arq_pool(redis)
        queue = JobQueue(pool, keys)
        await queue.enqueue_and_wake("b1", ["b1:0:0"], "t")
        await redis.script_flush()  # a restarted Redis has lost the script: it is sent again
        await queue.enqueue_and_wake("b2", ["b2:0:0"], "t")
        assert await pool.exists(job_key_prefix + "b1:0:0", job_key_prefix + "b2:0:0") == 2


async def test_a_picked_job_is_in_progress_as_arq_marks_it_and_cannot_be_picked_twice(redis: aioredis.Redis) -> None:
    pool, keys = arq_pool(redis), Keys()
    await JobQueue(pool, keys).enqueue("b1", 0, "b1:0:0")
    queued = await pool.zscore(keys.queue, "b1:0:0")
    pick = JobPick(pool, keys.queue)
    assert queued is not None and await pick.take("b1:0:0", 60_000) == int(queued)
    assert await Job("b1:0:0", pool, _queue_name=keys.queue).status() is JobStatus.in_progress  # arq's reading
    assert 0 < await pool.pttl(in_progress_key_prefix + "b1:0:0") <= 60_000
    assert await pick.take("b1:0:0", 60_000) is None  # another worker's second try


async def test_a_job_not_due_or_not_queued_is_not_picked(redis: aioredis.Redis) -> None:
    pool, keys = arq_pool(redis), Keys()
    await pool.enqueue_job(JOB_FUNCTION, "b1", 0, _job_id="b1:0:0", _queue_name=keys.queue, _defer_by=60)
    pick = JobPick(pool, keys.queue)
    assert await pick.take("b1:0:0", 60_000) is None
    assert await pick.take("b2:0:0", 60_000) is None
    assert await pool.exists(in_progress_key_prefix + "b1:0:0", in_progress_key_prefix + "b2:0:0") == 0
