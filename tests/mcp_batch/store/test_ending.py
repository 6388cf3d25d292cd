"""A batch's end and its renewals outside its own slot, against the real Redis: made by the ending script itself when
both planes are one Redis, the same changes in steps when the control plane is another client, each applied once."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import WEBHOOK_DUE, Keys
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from tests.mcp_batch.store.stored import batch, create, record
from tests.support import eventually

KEYS = Keys()
RETENTION_SECONDS = 600


async def ended_batch(store: Store, redis: aioredis.Redis) -> str:
    """A 3-item batch with a webhook, a deadline and a living Idempotency-Key, cancelled before any item ran: the
    end's settle has every change to make."""
    batch_id, idem = new_batch_id(), KEYS.idempotency("the-key")
    await redis.set(idem, batch_id, px=30_000)
    request = batch(3, retention_seconds=RETENTION_SECONDS, webhook_url="https://example.com/hook")
    await store.submits.create(request, 1, batch_id=batch_id, idempotency_key=idem)
    await redis.zadd(KEYS.deadlines, {batch_id: 1})
    await store.leases.cancel(batch_id)  # nothing in flight: it ends, and settles, now
    return batch_id


async def outside(redis: aioredis.Redis, batch_id: str) -> dict[str, object]:
    """What the end changes outside the batch's slot (times rounded to the second)."""
    released = await redis.zscore(KEYS.tenant_stored_until("default"), batch_id)
    seconds, micros = await redis.time()
    now_ms = seconds * 1000 + micros / 1000
    return {
        "unfinished": await redis.get(KEYS.unfinished),
        "tenant unfinished": await redis.get(KEYS.tenant_unfinished("default")),
        "released in (s)": None if released is None else round((released - now_ms) / 1000),
        "webhook due": await redis.zscore(KEYS.webhooks, batch_id),
        "deadline": await redis.zscore(KEYS.deadlines, batch_id),
        "key ttl (s)": round(await redis.pttl(KEYS.idempotency("the-key")) / 1000),
        "left to settle": await redis.hget(KEYS.batch(batch_id), "settle"),
    }


async def ended_on(store: Store, redis: aioredis.Redis) -> dict[str, object]:
    """The changes of one batch's end through `store`, once it has published its done message (once)."""
    await redis.flushdb()
    listener = redis.pubsub()
    await listener.subscribe(KEYS.done_channel)

    async def done_messages(batch_id: str) -> int:
        """Done messages naming `batch_id` in the next 0.1 s (channels span every database: other test workers'
        batches are heard too)."""
        heard, until = 0, time.monotonic() + 0.1
        while (left := until - time.monotonic()) > 0:
            message = await listener.get_message(ignore_subscribe_messages=True, timeout=left)
            heard += message is not None and message["data"] == batch_id.encode()
        return heard

    try:
        batch_id = await ended_batch(store, redis)
        assert await eventually(lambda: done_messages(batch_id), what="the done message") == 1
        changes = await outside(redis, batch_id)
        await store.claims.ending.settle(batch_id)  # again: nothing is left to apply, nothing is said twice
        assert await outside(redis, batch_id) == changes
        assert await done_messages(batch_id) == 0
    finally:
        await listener.aclose()
    return changes


async def test_one_script_on_one_redis_ends_a_batch_as_the_steps_over_two_clients_do(redis: aioredis.Redis) -> None:
    control = aioredis.Redis(**redis.connection_pool.connection_kwargs)  # another client: the steps' path
    try:
        one_node = await ended_on(Store(redis, KEYS, 3600), redis)
        two_planes = await ended_on(Store(redis, KEYS, 3600, control=control), redis)
    finally:
        await control.aclose()
    assert one_node == two_planes
    assert one_node == {
        "unfinished": b"0",
        "tenant unfinished": b"0",
        "released in (s)": RETENTION_SECONDS,
        "webhook due": 0.0,
        "deadline": None,
        "key ttl (s)": RETENTION_SECONDS,
        "left to settle": None,
    }


async def renewed(store: Store, redis: aioredis.Redis) -> list[object]:
    """The counts after 3 of a 5-item batch's items finished and its job renewed its lease, and after a second
    renewal (nothing more to take off); then whether its stored bytes' release follows its keys' TTL."""
    await redis.flushdb()
    batch_id, (job,) = await create(store, batch(5), 1)
    step = await store.claims.step(batch_id, job, [], 3)
    await store.claims.step(batch_id, job, [(claim, record("ok")) for claim in step.claims], 0)
    counts = [KEYS.unfinished, KEYS.tenant_unfinished("default")]
    seen: list[object] = [await redis.mget(counts)]  # finished items are taken off on renewal, not per item
    for _ in range(2):
        assert await store.leases.renew(batch_id, job)
        seen.append(await redis.mget(counts))
    seconds, micros = await redis.time()
    expires = seconds * 1000 + micros / 1000 + await redis.pttl(KEYS.batch(batch_id))
    released = await redis.zscore(KEYS.tenant_stored_until("default"), batch_id)
    seen.append(released is not None and abs(released - expires) < 1_000)  # the bytes' release follows the keys
    return seen


async def test_one_script_on_one_redis_renews_a_lease_and_counts_down_as_the_steps_over_two_clients_do(
    redis: aioredis.Redis,
) -> None:
    control = aioredis.Redis(**redis.connection_pool.connection_kwargs)
    try:
        one_node = await renewed(Store(redis, KEYS, 3600), redis)
        two_planes = await renewed(Store(redis, KEYS, 3600, control=control), redis)
    finally:
        await control.aclose()
    assert one_node == two_planes == [[b"5", b"5"], [b"2", b"2"], [b"2", b"2"], True]


async def _counts(redis: aioredis.Redis) -> tuple[int, int]:
    raw = await redis.mget([KEYS.unfinished, KEYS.tenant_unfinished("default")])
    return int(raw[0] or 0), int(raw[1] or 0)


async def _finished(store: Store, redis: aioredis.Redis) -> str:
    batch_id, (job,) = await create(store, batch(2), 1)
    step = await store.claims.step(batch_id, job, [], 2)
    await store.claims.step(batch_id, job, [(claim, record("ok")) for claim in step.claims], 0)
    return batch_id


async def _cancelled_at_once(store: Store, redis: aioredis.Redis) -> str:
    batch_id, _ = await create(store, batch(2), 1)
    await store.leases.cancel(batch_id)
    return batch_id


async def _cancelled_after_its_call(store: Store, redis: aioredis.Redis) -> str:
    batch_id, (job,) = await create(store, batch(3), 1)
    (claim,) = (await store.claims.step(batch_id, job, [], 1)).claims
    assert (await store.leases.cancel(batch_id)).outcome == "cancelling"
    await store.claims.step(batch_id, job, [(claim, record("ok"))], 0)  # the last call in flight ends it
    return batch_id


async def _expired(store: Store, redis: aioredis.Redis) -> str:
    batch_id, _ = await create(store, batch(2, deadline_seconds=60))
    await redis.hset(KEYS.batch(batch_id), "deadline_at", "1")  # the deadline is long past
    assert await store.leases.expire(batch_id) == "expired"
    return batch_id


async def _taken_over(store: Store, redis: aioredis.Redis) -> str:
    batch_id, (job,) = await create(store, batch(2), 1)
    await store.claims.step(batch_id, job, [], 1)
    assert (await store.leases.cancel(batch_id)).outcome == "cancelling"
    assert await store.leases.take_over(batch_id, job, job + ".next", force=True) == "done"  # its worker stopped
    return batch_id


@pytest.mark.parametrize("end", [_finished, _cancelled_at_once, _cancelled_after_its_call, _expired, _taken_over])
async def test_on_one_redis_every_end_settles_its_counts_in_its_own_script(
    redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch, end: Callable[[Store, aioredis.Redis], Awaitable[str]]
) -> None:
    store = Store(redis, KEYS, 3600)

    async def no_second_step(batch_id: str) -> None:
        raise AssertionError("an end on one Redis left its counts to a second step")

    monkeypatch.setattr(store.claims.ending, "settle", no_second_step)
    batch_id = await end(store, redis)
    assert (await redis.hget(KEYS.batch(batch_id), "status")) in (b"completed", b"cancelled", b"expired")
    assert await redis.hget(KEYS.batch(batch_id), "settle") is None
    assert await _counts(redis) == (0, 0)
    assert await redis.zscore(KEYS.deadlines, batch_id) is None


async def test_over_two_clients_an_end_leaves_its_counts_to_the_settle_step(redis: aioredis.Redis) -> None:
    control = aioredis.Redis(connection_pool=redis.connection_pool)  # another client: the control plane's
    store = Store(redis, KEYS, 3600, control=control)
    batch_id, _ = await create(store, batch(2), 1)
    await store.leases._cancel(store.leases._script_keys(batch_id), store.leases._script_args(batch_id))
    assert await redis.hget(KEYS.batch(batch_id), "settle") == b"2"
    assert await _counts(redis) == (2, 2)  # a crash here leaves them high, for the repair pass
    await store.claims.ending.settle(batch_id)
    assert await _counts(redis) == (0, 0)


async def ends_heard(store: Store, redis: aioredis.Redis, keys: Keys) -> tuple[list[bytes], list[bytes]]:
    """Two batches ended through `store` (with `keys`), one without a webhook, then one with: their ids, and what the
    done channel said meanwhile."""
    listener = redis.pubsub()
    await listener.subscribe(keys.done_channel)
    try:
        ended, heard = [], []
        for webhook in (None, "https://example.com/hook"):
            ended.append((batch_id := new_batch_id()).encode())
            await store.submits.create(batch(1, webhook_url=webhook), 1, batch_id=batch_id)
            await store.leases.cancel(batch_id)  # nothing in flight: it ends now

        async def all_heard() -> bool:
            message = await listener.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if message is not None:
                heard.append(message["data"])
            return len(heard) >= 3

        await eventually(all_heard, what="the done messages")
        if (more := await listener.get_message(ignore_subscribe_messages=True, timeout=0.2)) is not None:
            heard.append(more["data"])
        return ended, heard
    finally:
        await listener.aclose()


async def test_only_an_end_with_a_webhook_says_so_to_the_webhook_senders(redis: aioredis.Redis) -> None:
    keys = Keys(prefix=f"mcpb-{new_batch_id()[:8]}")  # a channel of its own: no other test worker's ends are heard
    control = aioredis.Redis(**redis.connection_pool.connection_kwargs)  # another client: the steps' path
    try:
        for store in (Store(redis, keys, 3600), Store(redis, keys, 3600, control=control)):
            (plain, hooked), heard = await ends_heard(store, redis, keys)
            assert heard == [plain, hooked, WEBHOOK_DUE.encode()]
    finally:
        await control.aclose()
