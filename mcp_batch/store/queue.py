"""The queue's one owner: queueing a shard job (and waking idle workers), and the workers' heartbeats.

Both live on the control-plane Redis (MCP_BATCH_REDIS_URL): arq's queue and the channels need a standalone or
Sentinel-managed Redis, while a batch's own data may live on a cluster (connection.py). Nothing outside the store
names arq's methods or these keys.
"""

from __future__ import annotations

from datetime import timedelta

from arq import ArqRedis
from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.store.overview import Heartbeat


def queue_name(keys: Keys) -> str:
    """The name of arq's queue (a worker's `queue_name`)."""
    return keys.queue


def wake_channel(keys: Keys) -> str:
    """The channel an idle worker's poll waits on."""
    return keys.wake_channel


class JobQueue:
    """Shard jobs into arq's queue, the wake that follows, and one worker's heartbeat."""

    def __init__(self, control: Redis, keys: Keys) -> None:
        self.control = control
        self.keys = keys

    async def enqueue(
        self, batch_id: str, shard: int, job: str, generation: int | None = None, ahead: timedelta | None = None
    ) -> None:
        """Queue one shard job under its id (arq refuses a second job with the same id); `ahead`: scored as if
        queued that long ago, so it runs before the jobs queued since (a high-priority batch)."""
        if not isinstance(self.control, ArqRedis):
            raise TypeError("queueing a job needs the control plane's arq pool")
        args: tuple[object, ...] = (batch_id, shard) if generation is None else (batch_id, shard, generation)
        defer = -ahead if ahead else None
        await self.control.enqueue_job("run_batch", *args, _job_id=job, _queue_name=self.keys.queue, _defer_by=defer)

    async def wake(self, batch_id: str) -> None:
        """Tell idle workers a job was queued, so they poll now rather than at their next poll."""
        await self.control.publish(self.keys.wake_channel, batch_id)

    def heartbeat(self, worker_id: str) -> Heartbeat:
        """The heartbeat of one worker (its id in the workers zset)."""
        return Heartbeat(self.control, self.keys, worker_id)

    async def forget(self, worker_id: str) -> None:
        """A stopping worker's heartbeat goes at once, not when it ages out."""
        await self.control.zrem(self.keys.workers, worker_id)


__all__ = ["Heartbeat", "JobQueue", "queue_name", "wake_channel"]
