"""Storing a large batch without holding up the event loop, and the tenant's ceiling on stored bytes (part of
`Submits.create`).

A 100,000-call batch is 100,000 JSON encodings, a MULTI of 200,000 arguments that redis-py packs on the event loop,
and as many objects to free: encoded and freed in a worker thread, its calls and ids written a chunk per round trip
ahead of the MULTI (nothing reads them until the MULTI writes the batch's meta, and they expire soon if it never
comes). The bytes of a batch's stored calls count under its tenant until the batch is gone (scripts.RESERVE_STORED).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from mcp_batch.errors import StoredBytesCeiling
from mcp_batch.keys import Keys
from mcp_batch.models import Call

CHUNK = 1_000  # calls per RPUSH, so one huge batch is not one huge command
STAGE_OVER = 5_000  # a batch with more calls writes them ahead of its MULTI
_STAGED_SECONDS = 600  # how long staged calls outlive a submit that failed before its MULTI
_RESERVED_GRACE_MS = 600_000  # a reservation this young counts though its batch's meta is not written yet
_OFF_LOOP_CALLS = 1_000  # a batch with more calls is encoded and freed in a worker thread

Encoded = tuple[list[str], list[tuple[str, int]]]


async def encode(calls: list[Call], spec: Callable[[int, Call], str]) -> Encoded:
    """The stored form of each call, and each call's (id, index); in a worker thread for a large batch."""

    def run() -> Encoded:
        specs = [spec(i, c) for i, c in enumerate(calls)]
        return specs, [(c.id or str(i), i) for i, c in enumerate(calls)]

    return await asyncio.to_thread(run) if len(calls) > _OFF_LOOP_CALLS else run()


async def release(specs: list[str], ids: list[tuple[str, int]]) -> None:
    """Free a large batch's encoded calls off the loop, a chunk at a time (freeing them at once is one long stop)."""

    def drain() -> None:
        for items in (specs, ids):
            while items:
                del items[-CHUNK:]
                time.sleep(0)  # let the event loop's thread take the GIL between chunks

    if len(specs) > _OFF_LOOP_CALLS:
        await asyncio.to_thread(drain)


async def stage(redis: Redis, keys: Keys, batch_id: str, specs: list[str], ids: list[tuple[str, int]]) -> None:
    """Write a large batch's calls and ids ahead of its MULTI, briefly kept (the MULTI gives them the batch's life)."""
    calls, ids_key = keys.calls(batch_id), keys.ids(batch_id)
    try:
        for start in range(0, len(specs), CHUNK):
            async with redis.pipeline(transaction=False) as pipe:
                pipe.rpush(calls, *specs[start : start + CHUNK])
                pipe.hset(ids_key, mapping=dict(ids[start : start + CHUNK]))
                pipe.expire(calls, _STAGED_SECONDS)
                pipe.expire(ids_key, _STAGED_SECONDS)
                await pipe.execute()
    except BaseException:
        await redis.delete(calls, ids_key)
        raise


async def reserve(
    script: AsyncScript, keys: Keys, tenant: str, batch_id: str, size: int, ceiling: int, retry_after: int
) -> None:
    """Count the batch's bytes under its tenant's, or refuse it (StoredBytesCeiling): counted at submit, released
    once the batch is gone (expired or deleted)."""
    args: list[str | int] = [keys.batch_prefix, batch_id, size, ceiling, int(time.time() * 1000), _RESERVED_GRACE_MS]
    reserved, stored = await script(keys=[keys.tenant_stored(tenant)], args=args)
    if not reserved:
        raise StoredBytesCeiling(int(stored), size, ceiling, retry_after)
