"""The store against the real Redis: atomic creation, exactly-once results, derived item states."""

from __future__ import annotations

import redis.asyncio as aioredis

from service.core.keys import Keys
from service.core.models import BatchRequest
from service.core.store import Store


def batch(n: int, **options: object) -> BatchRequest:
    calls = [{"id": f"c{i}", "server": "s", "tool": "t", "arguments": {"i": i}} for i in range(n)]
    return BatchRequest.model_validate({"calls": calls, **options})


def record(status: str) -> dict[str, object]:
    return {"status": status, "content": [], "is_error": False}


async def test_claims_come_in_order_with_their_call_specs(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = await store.create(batch(2), 4)
    first = await store.advance(batch_id, "w", None, want_next=True)
    second = await store.advance(batch_id, "w", None, want_next=True)
    assert first is not None and second is not None
    assert (first.index, first.id, first.arguments) == (0, "c0", {"i": 0})
    assert second.index == 1
    assert await store.advance(batch_id, "w", None, want_next=True) is None


async def test_a_result_is_counted_once_even_if_stored_twice(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = await store.create(batch(2), 4)
    claim = await store.advance(batch_id, "w", None, want_next=True)
    assert claim is not None
    await store.advance(batch_id, "w", (claim, record("error")), want_next=False)
    await store.advance(batch_id, "w", (claim, record("ok")), want_next=False)
    document = await store.document(batch_id)
    assert document.counts.failed == 1 and document.counts.succeeded == 0
    assert document.results[0].status == "error"
    assert document.results[1].status == "pending" and document.status == "running"


async def test_the_last_result_completes_the_batch(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = await store.create(batch(1), 4)
    claim = await store.advance(batch_id, "w", None, want_next=True)
    assert claim is not None
    assert (await store.document(batch_id)).results[0].status == "running"
    assert await store.advance(batch_id, "w", (claim, record("ok")), want_next=True) is None
    document = await store.document(batch_id)
    assert document.status == "completed" and document.ok and document.finished_at


async def test_a_stopped_batch_completes_when_its_running_items_finish(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = await store.create(batch(5, on_error="stop"), 4)
    a = await store.advance(batch_id, "w", None, want_next=True)
    b = await store.advance(batch_id, "w", None, want_next=True)
    assert a is not None and b is not None
    assert await store.advance(batch_id, "w", (a, record("error")), want_next=True) is None  # stop: no new claims
    document = await store.document(batch_id)
    assert document.status == "running" and document.stopped_at == 0
    assert document.counts.skipped == 3 and document.counts.running == 1
    await store.advance(batch_id, "w", (b, record("ok")), want_next=True)
    document = await store.document(batch_id)
    assert document.status == "completed"
    assert [r.status for r in document.results] == ["error", "ok", "skipped", "skipped", "skipped"]


async def test_a_failed_create_leaves_nothing(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = await store.create(batch(3), 4)
    await store.delete(batch_id)
    assert await redis.keys("*") == []
