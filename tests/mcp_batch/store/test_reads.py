"""Reading many items against the real Redis: finished items in finish order, read a chunk at a time with their calls
in runs of near indexes, are the document's items; a batch that expires while being read is not found."""

from __future__ import annotations

import random

import pytest
import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.contract import document as documents
from mcp_batch.errors import BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest, ItemStatus
from mcp_batch.records import error_info, record
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from mcp_batch.store.reads import spans
from tests.mcp_batch.store.stored import advance, read_document


async def finished_in_shuffled_order(store: Store, n: int, finish: int) -> tuple[str, list[int]]:
    """A batch of `n` calls, all claimed, `finish` of them finished in a shuffled order (every fifth an error)."""
    calls = [{"id": f"c{i}", "server": "s", "tool": "t", "arguments": {"i": i}} for i in range(n)]
    batch_id = new_batch_id()
    job = shards.job_id(batch_id, 0)
    await store.submits.create(BatchRequest.model_validate({"calls": calls}), 4, batch_id=batch_id, jobs=[job])
    claims = [await advance(store, batch_id, job, None, want_next=True) for _ in range(n)]
    order = random.Random(7).sample(range(n), finish)
    for index in order:
        claim = claims[index]
        assert claim is not None
        if index % 5:
            done = record(ItemStatus.ok, worker="w", content=[{"type": "text", "text": claim.id}], attempts=1)
        else:
            done = record(ItemStatus.error, worker="w", error=error_info("tool_error", "no", "tool"), attempts=1)
        await advance(store, batch_id, job, (claim, done), want_next=False)
    return batch_id, order


def test_runs_cover_the_indexes_with_few_unneeded_ones_between() -> None:
    assert spans([5]) == [(5, 5)]
    assert spans([3, 1, 2, 2]) == [(1, 3)]
    assert spans([0, 33, 67, 100], gap=32) == [(0, 33), (67, 100)]
    assert spans([10, 0, 200], gap=8) == [(0, 0), (10, 10), (200, 200)]
    assert spans([0, 10], gap=9) == [(0, 10)] and spans([0, 11], gap=9) == [(0, 0), (11, 11)]


async def test_finished_items_come_in_finish_order_as_the_document_shows_them(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, order = await finished_in_shuffled_order(store, 300, 250)
    row = await store.reads.row(batch_id)
    chunks = [chunk async for chunk in store.reads.finished_since(batch_id, 0, row, chunk=40)]
    listed = [item for chunk in chunks for item in documents.in_finish_order(row, chunk)]
    assert len(chunks) == 7 and [item["index"] for item in listed] == order
    assert [item.get("seq") for item in listed] == list(range(1, 251))
    assert all(item["id"] == f"c{item['index']}" for item in listed)
    shown = {item.index: item.model_dump(mode="json") for item in (await read_document(store, batch_id)).results}
    assert all(item == shown[item["index"]] for item in listed)
    assert {shown[i]["status"] for i in range(300) if i not in order} == {"running"}
    later = [item async for chunk in store.reads.finished_since(batch_id, 245, row) for item in chunk]
    assert [item.seq for item in later] == list(range(246, 251))
    assert [item.head["index"] for item in later] == order[245:]


async def test_a_page_renders_as_the_documents_items_as_plain_data(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, _ = await finished_in_shuffled_order(store, 30, 10)
    found, items = documents.page(batch_id, await store.reads.page(batch_id, 5, 20))
    rendered = await read_document(store, batch_id, 5, 20)
    assert [dict(item) for item in items] == [item.model_dump(mode="json") for item in rendered.results]
    assert found.results == [] and found.next_offset == rendered.next_offset == 25


async def test_a_batch_that_expires_while_its_items_are_read_is_not_found(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id, _ = await finished_in_shuffled_order(store, 20, 20)
    row = await store.reads.row(batch_id)
    await redis.delete(Keys().calls(batch_id))
    with pytest.raises(BatchNotFound):
        [chunk async for chunk in store.reads.finished_since(batch_id, 0, row)]
