"""Batches stored as the API stores them, and records as a worker hands them in, for the store's tests."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.contract import document as documents
from mcp_batch.keys import Keys
from mcp_batch.models import BatchDocument, BatchRequest, ItemResult
from mcp_batch.store import Store
from mcp_batch.store.claims import Claim
from mcp_batch.store.placement import new_batch_id


def batch(n: int, **options: object) -> BatchRequest:
    calls = [{"id": f"c{i}", "server": "s", "tool": "t", "arguments": {"i": i}} for i in range(n)]
    return BatchRequest.model_validate({"calls": calls, **options})


def record(status: str) -> dict[str, object]:
    return {"status": status, "content": [], "is_error": False}


async def create(store: Store, request: BatchRequest, jobs: int = 1) -> tuple[str, list[str]]:
    """A stored batch and its leased shard jobs (as the API makes them)."""
    batch_id = new_batch_id()
    names = [shards.job_id(batch_id, shard) for shard in range(jobs)]
    await store.submits.create(request, 4, batch_id=batch_id, jobs=names)
    return batch_id, names


async def advance(
    store: Store, batch_id: str, job: str, finished: tuple[Claim, Any] | None, want_next: bool
) -> Claim | None:
    """One item at a time through the worker's own step: record `finished` (if any), claim the next (if wanted)."""
    step = await store.claims.step(batch_id, job, [] if finished is None else [finished], 1 if want_next else 0)
    return step.claims[0] if step.claims else None


async def read_document(store: Store, batch_id: str, offset: int = 0, limit: int | None = None) -> BatchDocument:
    """The batch's document as the contract renders what the store read (without the byte budget)."""
    found, items = documents.page(batch_id, await store.reads.page(batch_id, offset, limit))
    return found.model_copy(update={"results": [ItemResult.model_validate(item) for item in items]})


async def lapse(redis: aioredis.Redis, job: str) -> None:
    """Make a job's lease lapse now (as if its worker stopped renewing it long ago): in the batch and the index."""
    batch_id = shards.parse(job)[0]
    await redis.hset(Keys().batch(batch_id), f"lease:{job}", 0)
    await redis.zadd(Keys().jobs, {job: 0})


async def take_lease(redis: aioredis.Redis, job: str) -> None:
    """Take a job's lease away (as a take-over does)."""
    await redis.hdel(Keys().batch(shards.parse(job)[0]), f"lease:{job}")
    await redis.zrem(Keys().jobs, job)
