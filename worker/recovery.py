"""Every worker's recovery loop: shard jobs whose lease lapsed are taken over, deadlines are applied, and every
`repair_seconds` the tenants' unfinished counts are reconciled with their living batches (store/repair.py).

A worker killed with SIGKILL stops renewing its jobs' leases. Within `sweep_seconds` of a lease lapsing, some
worker's loop hands that job's in-flight items to a replacement job (the next generation of the same shard) and
queues it; the take-over is one Lua script, so however many workers sweep, exactly one replacement is made.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from mcp_batch import shards
from worker import metrics
from worker.context import WorkerState

logger = logging.getLogger(__name__)


async def requeue(state: WorkerState, batch_id: str, shard: int, generation: int) -> None:
    """Queue a replacement shard job (its lease is already held for it) and wake idle workers."""
    queue = state.store.queue
    await queue.enqueue(batch_id, shard, shards.job_id(batch_id, shard, generation), generation)
    await queue.wake(batch_id)


async def sweep(state: WorkerState) -> int:
    """One pass: take over lapsed jobs, apply passed deadlines. Returns how many jobs were taken over."""
    store = state.store
    taken = 0
    for job in await store.leases.lapsed_jobs():
        batch_id, shard, generation = shards.parse(job)
        new_job = shards.job_id(batch_id, shard, generation + 1)
        outcome = await store.leases.take_over(batch_id, job, new_job)
        if outcome == "replaced":
            await requeue(state, batch_id, shard, generation + 1)
            taken += 1
            metrics.took_over()
            logger.warning("job %s stopped renewing its lease; its work goes to %s", job, new_job)
    for batch_id in await store.leases.due_deadlines():
        outcome = await store.leases.expire(batch_id)
        if outcome == "expired":
            logger.info("batch %s passed its deadline", batch_id)
    return taken


async def recover_forever(state: WorkerState) -> None:
    """Sweep every `sweep_seconds` until cancelled; a Redis outage only delays the next pass."""
    settings = state.settings
    loop = asyncio.get_running_loop()
    repair_at = loop.time() + settings.repair_seconds
    while True:
        try:
            await sweep(state)
            if loop.time() >= repair_at:
                repair_at = loop.time() + settings.repair_seconds
                taken = await state.store.repair.every_tenant()
                if taken:
                    logger.warning("the unfinished counts held %d items no living batch holds; taken off", taken)
        except (RedisError, OSError) as exc:
            logger.warning("recovery sweep failed: %s", type(exc).__name__)
        except Exception:
            logger.exception("recovery sweep failed")
        await asyncio.sleep(settings.sweep_seconds)  # a periodic duty: there is no event for "a lease lapsed"
