"""The queue's one owner: queueing a shard job (and waking idle workers), and the workers' heartbeats.

Both live on the control-plane Redis (MCP_BATCH_REDIS_URL): arq's queue and the channels need a standalone or
Sentinel-managed Redis, while a batch's own data may live on a cluster (connection.py). Nothing outside the store
names arq's methods or these keys.

A job is queued by one script that writes what arq's `ArqRedis.enqueue_job` writes (the job under arq's
`arq:job:<id>` key, serialized by arq's own `serialize_job`, expiring as arq's would, and its id scored in the queue)
and publishes the wake in the same round trip: a submit's jobs and their wake cost one round trip instead of arq's
three per job and a PUBLISH. arq's worker reads the job as it reads its own; tests/mcp_batch/store/test_queue.py
fails if arq's layout changes under the pin in pyproject.toml.

The queue is served oldest score first, and scores are fair between tenants (start-time fair queueing): a tenant's
job is scored at the later of the queue's head (the oldest job still in it, or a second before now) and the
tenant's own next turn, which each of its jobs moves on by `TURN_MS` (never past now: a job is due when queued). A
tenant with nothing queued starts next to the head; one with many jobs queued has its turns spread out behind, so
the others' jobs interleave with its backlog instead of waiting behind it. Priority is the tenant's own affair: the
worker runs a tenant's higher-priority jobs in that tenant's turns (worker/fair_pick.py), never in another's.
"""

from __future__ import annotations

from dataclasses import dataclass

from arq import ArqRedis
from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms
from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.store.overview import Heartbeat

JOB_FUNCTION = "run_batch"  # the name the worker registers its shard job under (worker/main.py)

TURN_MS = 0.001  # how far one job moves its tenant's next turn
SLACK_MS = 1_000  # turns start this far before now, so a million of one tenant's jobs are all due at once

# KEYS: 1 the queue, 2 the tenants' turns, then each job's arq job key and result key. ARGV: 1 the wake channel ('' no
# wake), 2 its message, 3 now (ms, the API's clock, as arq's enqueue_job), 4 the keys' life past their score (ms), 5
# the tenant ('' none: a job taken over, which goes next to the head), 6 TURN_MS, then per job: its id, the serialized
# job. A job whose key or result exists is left alone, as arq's enqueue_job does. Returns how many were queued.
ENQUEUE = f"""
local SLACK_MS = {SLACK_MS}
local now = tonumber(ARGV[3])
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local score = now - SLACK_MS
if head[2] and tonumber(head[2]) < score then score = tonumber(head[2]) end
if ARGV[5] ~= '' then
  local turn = tonumber(redis.call('HGET', KEYS[2], ARGV[5]) or '0')
  if turn > score then score = turn end
end
local queued = 0
for j = 0, (#KEYS - 2) / 2 - 1 do
  local a = 7 + 2 * j
  if redis.call('EXISTS', KEYS[3 + 2 * j], KEYS[4 + 2 * j]) == 0 then
    local due = math.min(score, now)  -- never later than now: a job scored ahead would wait for its time
    redis.call('PSETEX', KEYS[3 + 2 * j], math.max(1, math.floor(due - now + tonumber(ARGV[4]))), ARGV[a + 1])
    redis.call('ZADD', KEYS[1], string.format('%.3f', due), ARGV[a])
    score = score + tonumber(ARGV[6])
    queued = queued + 1
  end
end
if ARGV[5] ~= '' and queued > 0 then redis.call('HSET', KEYS[2], ARGV[5], string.format('%.3f', score)) end
if ARGV[1] ~= '' then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return queued
"""


def queue_name(keys: Keys) -> str:
    """The name of arq's queue (a worker's `queue_name`)."""
    return keys.queue


def wake_channel(keys: Keys) -> str:
    """The channel an idle worker's poll waits on."""
    return keys.wake_channel


# KEYS: 1 the job's arq in-progress key, 2 the queue. ARGV: 1 the job id, 2 now (ms, the worker's clock, which arq
# compares scores with), 3 the in-progress key's life (ms). The job's score when the caller now runs it; false when
# it runs elsewhere, is gone from the queue or is not due yet: arq's own check, made in one round trip.
_PICK = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then return false end
redis.call('PSETEX', KEYS[1], ARGV[3], '1')
return score
"""


class JobPick:
    """A worker's pick of one queued job, as arq's `Worker.start_jobs` makes it (the in-progress key arq's worker and
    `Job.status` read, set only when no other worker holds the job and its score is due) in one script instead of
    arq's WATCH, EXISTS, ZSCORE and MULTI."""

    def __init__(self, control: Redis, queue: str) -> None:
        self._script = control.register_script(_PICK)
        self._queue = queue

    async def take(self, job: str, life_ms: int) -> int | None:
        """The job's score once this worker holds it, or None when it must not run it."""
        score = await self._script(
            keys=[in_progress_key_prefix + job, self._queue], args=[job, timestamp_ms(), life_ms]
        )
        return None if score is None else int(float(score))


@dataclass(frozen=True)
class QueueStep:
    """The KEYS and ARGV of the ENQUEUE script for some jobs."""

    keys: list[str]
    args: list[str | int | float | bytes]


class JobQueue:
    """Shard jobs into arq's queue, the wake that follows, and one worker's heartbeat."""

    def __init__(self, control: Redis, keys: Keys) -> None:
        self.control = control
        self.keys = keys
        self._enqueue = control.register_script(ENQUEUE)

    async def enqueue(self, batch_id: str, shard: int, job: str, generation: int | None = None) -> None:
        """Queue one shard job under its id (a second job with the same id is refused, as arq refuses it): a job
        taken over from a worker that stopped, which goes next to the queue's head (it had its turn already)."""
        args: tuple[object, ...] = (batch_id, shard) if generation is None else (batch_id, shard, generation)
        await self._queue([(job, args)], None, wake=None)

    async def enqueue_and_wake(self, batch_id: str, jobs: list[str], tenant: str) -> None:
        """Queue a new batch's shard jobs (shard n is `jobs[n]`) in the tenant's turns and wake idle workers, in
        one round trip."""
        await self.send(self.step_to_wake(batch_id, jobs, tenant))

    def step_to_wake(self, batch_id: str, jobs: list[str], tenant: str) -> QueueStep:
        """What `enqueue_and_wake` sends, for a submit that sends it in its own round trip (Submits.create), or with
        `send` when that could not."""
        return self._step([(job, (batch_id, shard)) for shard, job in enumerate(jobs)], tenant, wake=batch_id)

    async def send(self, step: QueueStep) -> None:
        """Queue the jobs of a step made here (`step_to_wake`)."""
        await self._enqueue(step.keys, step.args)

    async def _queue(self, jobs: list[tuple[str, tuple[object, ...]]], tenant: str | None, wake: str | None) -> None:
        await self.send(self._step(jobs, tenant, wake))

    def _step(self, jobs: list[tuple[str, tuple[object, ...]]], tenant: str | None, wake: str | None) -> QueueStep:
        # As arq's enqueue_job: the job's enqueue time from this clock, the key's life a day past its score; the
        # serializer is the pool's (the worker's pool deserializes with its counterpart).
        pool = self.control
        if not isinstance(pool, ArqRedis):
            raise TypeError("queueing a job needs the control plane's arq pool")
        now = timestamp_ms()
        keys = [self.keys.queue, self.keys.queue_turns]
        args: list[str | int | float | bytes] = ["" if wake is None else self.keys.wake_channel, wake or ""]
        args += [now, pool.expires_extra_ms, tenant or "", TURN_MS]
        for job, job_args in jobs:
            keys += [job_key_prefix + job, result_key_prefix + job]
            body = serialize_job(JOB_FUNCTION, job_args, {}, None, now, serializer=pool.job_serializer)
            args += [job, body]
        return QueueStep(keys, args)

    async def wake(self, batch_id: str) -> None:
        """Tell idle workers a job was queued, so they poll now rather than at their next poll."""
        await self.control.publish(self.keys.wake_channel, batch_id)

    def heartbeat(self, worker_id: str) -> Heartbeat:
        """The heartbeat of one worker (its id in the workers zset)."""
        return Heartbeat(self.control, self.keys, worker_id)

    async def forget(self, worker_id: str) -> None:
        """A stopping worker's heartbeat goes at once, not when it ages out."""
        await self.control.zrem(self.keys.workers, worker_id)


__all__ = ["ENQUEUE", "Heartbeat", "JobPick", "JobQueue", "QueueStep", "queue_name", "wake_channel"]
