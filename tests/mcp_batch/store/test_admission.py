"""A submit's ceilings against the real Redis: what it costs whatever the tenant keeps alive, the stored bytes it
holds until its batch is gone (ended and expired, abandoned and expired, or removed unqueued), and its steps and its
jobs' queueing as one script where the control plane is the data plane's one node."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from arq import ArqRedis

from mcp_batch import shards
from mcp_batch.errors import Backpressure, StoredBytesCeiling
from mcp_batch.keys import Keys
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from mcp_batch.store.submits import Created, Submits
from tests.mcp_batch.store.stored import batch
from tests.redis_server import RedisServer
from tests.support import eventually

pytestmark = pytest.mark.timeout(120)

LIVING = 5_000


async def commands_run(redis: aioredis.Redis) -> int:
    """Commands Redis has run so far (inside scripts too), not counting the INFO calls that read it."""
    stats = await redis.info("commandstats")
    return sum(int(s["calls"]) for name, s in stats.items() if name != "cmdstat_info")


async def commands_of_one_submit(store: Store) -> int:
    before = await commands_run(store.submits.redis)
    await store.submits.create(batch(1), 1, max_stored_bytes=10**12)
    return await commands_run(store.submits.redis) - before


async def gone(redis: aioredis.Redis, batch_id: str) -> bool:
    return not await redis.exists(Keys().batch(batch_id))


async def seed(store: Store, count: int) -> None:
    """`count` living batches of the default tenant, stored as a submit stores them."""
    for start in range(0, count, 500):
        creates = (store.submits.create(batch(1), 1) for _ in range(start, min(count, start + 500)))
        await asyncio.gather(*creates)


async def test_a_submit_runs_as_many_redis_commands_with_5000_living_batches_as_with_none(
    own_redis: RedisServer,
) -> None:
    # A Redis of its own: its command counts are the whole server's, which no other test may add to.
    async with aioredis.Redis.from_url(own_redis.url) as redis:
        store = Store(redis, Keys(), 3600)
        await commands_of_one_submit(store)  # the first submit loads the scripts
        alone = await commands_of_one_submit(store)
        await seed(store, LIVING)
        crowded = await commands_of_one_submit(store)
    assert crowded == alone, (alone, crowded)


async def test_a_batchs_bytes_are_released_once_it_has_ended_and_expired(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    first = (await store.submits.create(batch(3, retention_seconds=1), 1, max_stored_bytes=200)).batch_id
    with pytest.raises(StoredBytesCeiling):
        await store.submits.create(batch(3), 1, max_stored_bytes=200)
    await store.leases.cancel(first)  # nothing in flight: it ends now, and expires a second later
    with pytest.raises(StoredBytesCeiling):  # ended, not yet expired: its bytes are still stored
        await store.submits.create(batch(3), 1, max_stored_bytes=200)
    await eventually(lambda: gone(redis, first), what="the ended batch to expire", timeout=10)
    # Its release time was set on the tenant's slot by the end's second script, a round trip after the batch's keys
    # took their TTL: the bytes come free that much after the keys go (a ceiling met a moment early, never passed).
    await eventually(lambda: stored_within(store, 200), what="the expired batch's bytes to be released", timeout=5)


async def stored_within(store: Store, ceiling: int) -> bool:
    try:
        await store.submits.create(batch(3), 1, max_stored_bytes=ceiling)
    except StoredBytesCeiling:
        return False
    return True


async def test_an_abandoned_batchs_bytes_are_released_once_its_keys_expire(redis: aioredis.Redis) -> None:
    keys = Keys()
    short = Submits(redis, keys, 3600, 300_000, lease_ms=30_000, live_ms=1_000)  # nobody works on it: gone in 1 s
    abandoned = (await short.create(batch(3), 1, max_stored_bytes=200)).batch_id
    with pytest.raises(StoredBytesCeiling):
        await short.create(batch(3), 1, max_stored_bytes=200)
    await eventually(lambda: gone(redis, abandoned), what="the batch's keys to expire", timeout=10)
    await short.create(batch(3), 1, max_stored_bytes=200)


async def test_a_batch_removed_before_it_was_queued_frees_its_bytes_at_once(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = new_batch_id()
    await store.submits.create(batch(3), 1, batch_id=batch_id, max_stored_bytes=200)
    await store.submits.delete(batch_id, [])
    await store.submits.create(batch(3), 1, max_stored_bytes=200)


async def test_concurrent_submits_on_separate_connections_never_pass_the_stored_bytes_ceiling(
    redis: aioredis.Redis,
) -> None:
    one_call = len(b'{"id":"c0","server":"s","tool":"t","arguments":{"i":0}}')  # what batch(1) stores
    clients = [aioredis.Redis(**redis.connection_pool.connection_kwargs) for _ in range(20)]
    start = asyncio.Event()
    ready = 0

    async def one(client: aioredis.Redis) -> bool:
        nonlocal ready
        await client.ping()  # its own connection, open before the start
        ready += 1
        if ready == len(clients):
            start.set()
        await start.wait()
        try:
            await Store(client, Keys(), 3600).submits.create(batch(1), 1, max_stored_bytes=10 * one_call)
        except StoredBytesCeiling:
            return False
        return True

    try:
        accepted = await asyncio.gather(*(one(client) for client in clients))
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    assert sum(accepted) == 10


async def release_lag_ms(redis: aioredis.Redis, batch_id: str) -> float:
    """How far the release of a batch's bytes is from its keys' expiry (ms)."""
    keys = Keys()
    seconds, micros = await redis.time()
    expires = seconds * 1000 + micros / 1000 + await redis.pttl(keys.batch(batch_id))
    release = await redis.zscore(keys.tenant_stored_until("default"), batch_id)
    assert release is not None
    return abs(release - expires)


async def test_the_release_of_a_batchs_bytes_follows_its_keys_ttl_when_renewed_and_when_ended(
    redis: aioredis.Redis,
) -> None:
    keys = Keys()
    store = Store(redis, keys, 3600)
    short = Submits(redis, keys, 3600, 300_000, lease_ms=30_000, live_ms=5_000)
    batch_id, job = new_batch_id(), "job-0"
    await short.create(batch(2, retention_seconds=600), 1, batch_id=batch_id, jobs=[job])
    assert await release_lag_ms(redis, batch_id) < 1_000
    assert await store.leases.renew(batch_id, job)  # keeps it alive for the store's own (long) life
    assert await redis.pttl(keys.batch(batch_id)) > 60_000
    assert await release_lag_ms(redis, batch_id) < 1_000
    await store.leases.cancel(batch_id)  # ended: it lives its retention
    assert 0 < await redis.pttl(keys.batch(batch_id)) <= 600_000
    assert await release_lag_ms(redis, batch_id) < 1_000


async def counts(redis: aioredis.Redis) -> list[object]:
    keys = Keys()
    tenant = [keys.tenant_unfinished("default"), keys.tenant_stored_bytes("default")]
    return [*await redis.mget([keys.unfinished, *tenant]), await redis.zcard(keys.tenant_batches("default"))]


async def test_a_submit_one_ceiling_refuses_takes_back_what_the_other_step_reserved(redis: aioredis.Redis) -> None:
    """The control and tenant steps run together: the one that admitted is undone when the other refuses."""
    store = Store(redis, Keys(), 3600)
    await store.submits.create(batch(2), 1)
    before = await counts(redis)
    with pytest.raises(Backpressure):  # the service's ceiling: the tenant's step had reserved
        await store.submits.create(batch(3), 1, max_unfinished_items=4)
    assert await counts(redis) == before
    with pytest.raises(Backpressure):  # the tenant's ceiling: the control step had reserved
        await store.submits.create(batch(3), 1, tenant_max_unfinished_items=4)
    assert await counts(redis) == before
    with pytest.raises(StoredBytesCeiling):
        await store.submits.create(batch(3), 1, max_stored_bytes=1)
    assert await counts(redis) == before
    await store.submits.create(batch(3), 1, max_unfinished_items=5, tenant_max_unfinished_items=5)
    assert await counts(redis) != before


def one_node(redis: aioredis.Redis) -> Store:
    """A store whose control plane (arq's pool) is its data plane's one Redis, as `mcp-batch api` makes it."""
    return Store(ArqRedis(redis.connection_pool, default_queue_name=Keys().queue), Keys(), 3600)


async def queued_jobs(redis: aioredis.Redis) -> list[bytes]:
    return list(await redis.zrange(Keys().queue, 0, -1))


async def test_on_one_node_a_submit_stores_and_queues_its_batch_and_wakes_the_workers_in_one_round_trip(
    own_redis: RedisServer,
) -> None:
    async with aioredis.Redis.from_url(own_redis.url) as redis:
        store = one_node(redis)

        async def submit() -> Created:
            batch_id = new_batch_id()
            jobs = [shards.job_id(batch_id, 0)]
            step = store.queue.step_to_wake(batch_id, jobs, "default")
            return await store.submits.create(batch(3), 1, batch_id=batch_id, jobs=jobs, queue=step)

        await submit()  # the first loads the script
        async with redis.pubsub() as wakes:
            await wakes.subscribe(Keys().wake_channel)
            await wakes.get_message(timeout=1)  # the subscription's own message
            before = (await redis.info("commandstats"))["cmdstat_evalsha"]["calls"]
            created = await submit()
            after = (await redis.info("commandstats"))["cmdstat_evalsha"]["calls"]
            woken = await wakes.get_message(ignore_subscribe_messages=True, timeout=5)
        assert created.queued and after - before == 1
        assert woken is not None and woken["data"].decode() == created.batch_id
        assert (await store.reads.row(created.batch_id)).total == 3
        assert shards.job_id(created.batch_id, 0).encode() in await queued_jobs(redis)


async def test_on_one_node_a_refused_submit_stores_queues_and_counts_nothing(redis: aioredis.Redis) -> None:
    store = one_node(redis)
    await store.submits.create(batch(2), 1)
    before = await counts(redis)
    refusals: list[tuple[type[Exception], dict[str, Any]]] = [
        (Backpressure, {"max_unfinished_items": 4}),  # the control step's: the tenant's never ran
        (Backpressure, {"tenant_max_unfinished_items": 4}),  # the tenant's: the control step's is taken back
        (StoredBytesCeiling, {"max_stored_bytes": 1}),
    ]
    for refusal, ceiling in refusals:
        batch_id = new_batch_id()
        jobs = [shards.job_id(batch_id, 0)]
        step = store.queue.step_to_wake(batch_id, jobs, "default")
        with pytest.raises(refusal):
            await store.submits.create(batch(3), 1, batch_id=batch_id, jobs=jobs, queue=step, **ceiling)
        assert await counts(redis) == before, ceiling
        assert await queued_jobs(redis) == [] and await gone(redis, batch_id)


async def test_with_the_control_plane_elsewhere_the_caller_queues_the_jobs(redis: aioredis.Redis) -> None:
    control = ArqRedis(redis.connection_pool, default_queue_name=Keys().queue)
    store = Store(redis, Keys(), 3600, control=control)  # two clients: two Redis, as far as the store knows
    batch_id = new_batch_id()
    jobs = [shards.job_id(batch_id, 0)]
    step = store.queue.step_to_wake(batch_id, jobs, "default")
    created = await store.submits.create(batch(3), 1, batch_id=batch_id, jobs=jobs, queue=step)
    assert not created.queued and await queued_jobs(redis) == []
