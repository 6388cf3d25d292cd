"""A batch's life beyond claiming: shard job leases and their take-over, cancel and deadlines (`Store.leases`).

Each is one Lua script (scripts.py) over the batch's keys, so a take-over, a cancel or an expiry is atomic whatever
the workers are doing meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch import shards
from mcp_batch.errors import BatchAlreadyFinished, BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import BatchStatus
from mcp_batch.store.scripts import CANCEL, EXPIRE, RENEW, TAKE_OVER, batch_args, batch_keys

# A shard job started on a worker: the batch names the worker (`runner:<job>`), for the items a take-over (TAKE_OVER)
# finds it had in flight. KEYS: 1 meta. ARGV: 1 job, 2 worker. Nothing is written for a batch that is gone.
_STARTED = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'runner:' .. ARGV[1], ARGV[2]) end
"""


@dataclass(frozen=True)
class CancelOutcome:
    """What a cancel did: `cancelling` (calls in flight will end) or `ended` (the batch is cancelled now)."""

    outcome: str
    status: BatchStatus


def _next_generation(job: str) -> tuple[str, int, int]:
    batch_id, shard, generation = shards.parse(job)
    return batch_id, shard, generation + 1


class Leases:
    """Leases, take-overs, cancel and expiry."""

    def __init__(self, redis: Redis, keys: Keys, lease_ms: int, live_ms: int) -> None:
        self.redis = redis
        self.keys = keys
        self.lease_ms = lease_ms
        self.live_ms = live_ms
        self._take_over = redis.register_script(TAKE_OVER)
        self._cancel = redis.register_script(CANCEL)
        self._expire = redis.register_script(EXPIRE)
        self._renew = redis.register_script(RENEW)
        self._started = redis.register_script(_STARTED)

    def _script_keys(self, batch_id: str) -> list[str]:
        return batch_keys(self.keys, batch_id)

    def _script_args(self, batch_id: str) -> list[Any]:
        return batch_args(self.keys, batch_id)

    async def renew(self, batch_id: str, job: str) -> bool:
        """Start or renew a shard job's lease (and keep its batch alive); False when the lease was taken over."""
        keys = [self.keys.jobs, self.keys.unfinished, *self.keys.batch_keys(batch_id)]
        return bool(await self._renew(keys, [job, self.lease_ms, self.live_ms, batch_id]))

    async def started(self, batch_id: str, job: str, worker: str) -> None:
        """Record which worker runs a shard job: items a take-over finds it had in flight name it, should they never
        finish (their batch halted before another worker took them over)."""
        await self._started([self.keys.batch(batch_id)], [job, worker])

    async def release(self, batch_id: str, job: str) -> str:
        """A shard job ran out of items: drop its lease. Claims it still holds were lost with their replies (Redis
        stopped before answering); those go to a replacement job ('replaced': the caller queues it)."""
        new_job = shards.job_id(*_next_generation(job))
        return await self.take_over(batch_id, job, new_job, mode="2")

    async def take_over(
        self,
        batch_id: str,
        job: str,
        new_job: str,
        force: bool = False,
        never_dispatched: list[int] | None = None,
        mode: str | None = None,
    ) -> str:
        """Hand a shard job's in-flight items to a replacement job (leased to `new_job`, which the caller queues).

        Without force, only when the job's lease has lapsed. Returns 'replaced' when the caller must queue
        `new_job`; 'gone', 'alive', 'queued', 'released' or 'done' when not."""
        keys = [
            *self._script_keys(batch_id),
            self.keys.queue,
            self.keys.arq_job(job),
            self.keys.arq_in_progress(job),
        ]
        clean = ",".join(str(i) for i in never_dispatched or [])
        mode = mode or ("1" if force else "0")
        args = [*self._script_args(batch_id), job, new_job, self.lease_ms, mode, self.live_ms, clean]
        reply = await self._take_over(keys, args)
        return cast(bytes, reply).decode()

    async def lapsed_jobs(self, limit: int = 100) -> list[str]:
        """Shard jobs whose lease has lapsed (on Redis's clock)."""
        seconds, micros = await self.redis.time()
        now_ms = seconds * 1000 + micros // 1000
        raw = await self.redis.zrangebyscore(self.keys.jobs, "-inf", now_ms, start=0, num=limit)
        return [member.decode() for member in raw]

    async def cancel(self, batch_id: str) -> CancelOutcome:
        """Stop a batch: nothing more starts; it ends when its calls in flight end (BatchAlreadyFinished if over)."""
        args = [*self._script_args(batch_id), self.keys.cancel_channel]
        outcome, status = (v.decode() for v in await self._cancel(self._script_keys(batch_id), args))
        if outcome == "missing":
            raise BatchNotFound(batch_id)
        if outcome == "finished":
            raise BatchAlreadyFinished(batch_id, status)
        return CancelOutcome(outcome, BatchStatus(status))

    async def expire(self, batch_id: str) -> str:
        """Apply a batch's deadline if it has passed; returns the script's outcome."""
        reply = await self._expire(self._script_keys(batch_id), self._script_args(batch_id))
        return cast(bytes, reply).decode()

    async def due_deadlines(self, limit: int = 100) -> list[str]:
        """Batches whose deadline has passed and which have not ended yet."""
        now_ms = int(time.time() * 1000)
        raw = await self.redis.zrangebyscore(self.keys.deadlines, "-inf", now_ms, start=0, num=limit)
        return [member.decode() for member in raw]
