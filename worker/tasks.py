"""The arq job: take a batch's items one by one through the store, call the backend, store each result."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from service.core import shards
from service.core.document import iso
from service.core.errors import BatchNotFound
from service.core.models import ItemStatus, Mode
from service.core.store import Claim, Store

from .mcp_call import SessionPool, run_call
from .references import BatchReferences

logger = logging.getLogger(__name__)


async def run_batch(ctx: dict[str, Any], batch_id: str, shard: int = 0) -> None:
    """Run one shard of a batch: its share of `max_concurrency` lanes (one in serial mode), each finishing and
    claiming items in one round trip, until nothing is left to claim. Shards on other workers claim from the same
    cursor, so they share the items however fast each goes."""
    store: Store = ctx["store"]
    pool: SessionPool = ctx["pool"]
    worker_id: str = ctx["worker_id"]
    try:
        meta = await store.meta(batch_id)
    except BatchNotFound:
        logger.warning("batch %s is gone (expired or deleted) before it ran", batch_id)
        return
    lanes = 1 if meta.mode is Mode.serial else shards.lanes(meta.max_concurrency, meta.shards, shard)
    references = BatchReferences(store, batch_id)

    async def lane() -> None:
        finished: tuple[Claim, dict[str, Any]] | None = None
        while True:
            claim = await store.advance(batch_id, worker_id, finished, want_next=True)
            if claim is None:
                return
            queued = round(time.time() - meta.created_at, 6)
            try:
                prepared = await references.prepare(claim)
                if isinstance(prepared, Claim):
                    record = await run_call(pool, prepared, worker_id, meta.read_only)
                else:
                    now = iso(time.time())  # ended before dispatch: nothing ran
                    record = prepared | {"worker": worker_id, "started_at": now, "finished_at": now, "attempts": 0}
            except Exception:  # a bug must not leave the item running forever
                logger.exception("batch %s item %d failed inside the worker", batch_id, claim.index)
                record = {
                    "status": ItemStatus.error.value,
                    "worker": worker_id,
                    "error": {"code": "internal_error", "message": "the worker failed", "type": "internal"},
                }
            record["queued_seconds"] = queued
            references.finished(claim.index, record)
            finished = (claim, record)

    await asyncio.gather(*(lane() for _ in range(lanes)))
    logger.info("batch %s: worker %s has no more items to run", batch_id, worker_id)
