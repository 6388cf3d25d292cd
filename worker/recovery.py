"""Every worker's recovery loop: shard jobs whose lease lapsed are taken over, and deadlines are applied.

A worker killed with SIGKILL stops renewing its jobs' leases. Within `sweep_seconds` of a lease lapsing, some
worker's loop hands that job's in-flight items to a replacement job (the next generation of the same shard) and
queues it; the take-over is one Lua script, so however many workers sweep, exactly one replacement is made.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.exceptions import RedisError

from mcp_batch import shards
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.batches import Store
from worker import worker_metrics as metrics

logger = logging.getLogger(__name__)


async def requeue(ctx: dict[str, Any], batch_id: str, shard: int, generation: int) -> None:
    """Queue a replacement shard job (its lease is already held for it) and wake idle workers."""
    keys: Keys = ctx["store"].keys
    redis = ctx["redis"]
    job = shards.job_id(batch_id, shard, generation)
    await redis.enqueue_job("run_batch", batch_id, shard, generation, _job_id=job, _queue_name=keys.queue)
    await redis.publish(keys.wake_channel, batch_id)


async def sweep(ctx: dict[str, Any]) -> int:
    """One pass: take over lapsed jobs, apply passed deadlines. Returns how many jobs were taken over."""
    store: Store = ctx["store"]
    taken = 0
    for job in await store.lapsed_jobs():
        batch_id, shard, generation = shards.parse(job)
        new_job = shards.job_id(batch_id, shard, generation + 1)
        outcome = await store.take_over(batch_id, job, new_job)
        if outcome == "replaced":
            await requeue(ctx, batch_id, shard, generation + 1)
            taken += 1
            metrics.took_over()
            logger.warning("job %s stopped renewing its lease; its work goes to %s", job, new_job)
    for batch_id in await store.due_deadlines():
        outcome = await store.expire(batch_id)
        if outcome == "expired":
            logger.info("batch %s passed its deadline", batch_id)
    return taken


async def recover_forever(ctx: dict[str, Any]) -> None:
    """Sweep every `sweep_seconds` until cancelled; a Redis outage only delays the next pass."""
    settings: Settings = ctx["settings"]
    while True:
        try:
            await sweep(ctx)
        except (RedisError, OSError) as exc:
            logger.warning("recovery sweep failed: %s", type(exc).__name__)
        except Exception:
            logger.exception("recovery sweep failed")
        await asyncio.sleep(settings.sweep_seconds)  # a periodic duty: there is no event for "a lease lapsed"
