"""Batches stored as the API stores them, and records as a worker hands them in, for the store's tests."""

from __future__ import annotations

from mcp_batch import shards
from mcp_batch.models import BatchRequest
from mcp_batch.store import Store
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
