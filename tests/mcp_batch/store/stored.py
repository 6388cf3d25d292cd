"""Batches stored as the API stores them, and records as a worker hands them in, for the store's tests."""

from __future__ import annotations

from typing import Any

from mcp_batch import shards
from mcp_batch.contract import document as documents
from mcp_batch.models import BatchDocument, BatchRequest, ItemResult
from mcp_batch.store import Store
from mcp_batch.store.claims import Claim
from mcp_batch.store.submits import new_batch_id


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
