"""A batch's life beyond claiming: shard job leases and their take-over, cancel and deadlines (`Store.leases`).

Each is one Lua script (scripts.py) over the batch's keys (one slot), so a take-over, a cancel or an expiry is atomic
whatever the workers are doing meanwhile; one that ends the batch settles its counts in the same script where every
key is on one node (ending.py). A job's lease is the batch's `lease:<job>` field; the control plane's
`{p}:jobs` index, which the recovery sweep reads, follows it and may lag it: the batch's field decides.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch import shards
from mcp_batch.errors import BatchAlreadyFinished, BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH, BatchStatus
from mcp_batch.store.batch_row import META_FIELDS, BatchMeta, parse_meta
from mcp_batch.store.ending import ONE_NODE_RENEW, Ending
from mcp_batch.store.scripts import CANCEL, EXPIRE, RENEW, TAKE_OVER, batch_args, batch_keys

# KEYS: 1 the jobs index. ARGV: 1 'NX', 'XX' or '' (ZADD's flag), 2 ms from now (this Redis's clock), then job ids.
_INDEX = """
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
for i = 3, #ARGV do
  if ARGV[1] == '' then
    redis.call('ZADD', KEYS[1], at, ARGV[i])
  else
    redis.call('ZADD', KEYS[1], ARGV[1], at, ARGV[i])
  end
end
return at
"""

# KEYS: 1 arq queue, 2 arq in-progress of the job. ARGV: job. 1 when it waits in arq's queue and has not started.
_QUEUED = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('EXISTS', KEYS[2]) == 0 then return 1 end
return 0
"""


# A shard job's start, in one script: its renewal (RENEW, or ending.py's one-node one, as a function: its returns end
# only it), the batch naming the worker that runs the job (`runner:<job>`, for the items a take-over (TAKE_OVER) finds
# it had in flight; nothing is written for a batch that is gone) and the batch's meta and `questions` read. KEYS: the
# batch keys. ARGV: the renewal's (1 job, 2 lease ms, 3 ttl ms, and on one node 4 the batch id, 5 the unfinished
# count's key; '' else), 6 the worker, then the meta fields. Returns {the renewal's reply, the meta fields' values,
# the questions setting}.
def _start_script(renew: str) -> str:
    return (
        f"local function renew()\n{renew}end\nlocal renewed = renew()\n"
        + """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'runner:' .. ARGV[1], ARGV[6]) end
return {renewed, redis.call('HMGET', KEYS[1], unpack(ARGV, 7)), redis.call('HGET', KEYS[1], 'questions')}
"""
    )


TERMINAL_VALUES = frozenset(status.value for status in TERMINAL_BATCH)


@dataclass(frozen=True)
class CancelOutcome:
    """What a cancel did: `cancelling` (calls in flight will end) or `ended` (the batch is cancelled now)."""

    outcome: str
    status: BatchStatus


@dataclass(frozen=True)
class JobStart:
    """What a shard job's start found: whether its lease is still its own, the batch's meta (None: the batch is gone)
    and its `questions` setting as submitted (None: it set none)."""

    renewed: bool
    meta: BatchMeta | None
    questions: bytes | None


def _next_generation(job: str) -> tuple[str, int, int]:
    batch_id, shard, generation = shards.parse(job)
    return batch_id, shard, generation + 1


class Leases:
    """Leases, take-overs, cancel and expiry."""

    def __init__(self, redis: Redis, keys: Keys, lease_ms: int, live_ms: int, control: Redis, ending: Ending) -> None:
        self.redis = redis
        self.control = control
        self.ending = ending
        self.keys = keys
        self.lease_ms = lease_ms
        self.live_ms = live_ms
        self._take_over = ending.script(TAKE_OVER)
        self._cancel = ending.script(CANCEL)
        self._expire = ending.script(EXPIRE)
        self._renew = redis.register_script(ONE_NODE_RENEW if ending.one_node else RENEW)
        self._start = redis.register_script(_start_script(ONE_NODE_RENEW if ending.one_node else RENEW))
        self._index = control.register_script(_INDEX)
        self._queued = control.register_script(_QUEUED)

    def _script_keys(self, batch_id: str) -> list[str]:
        return self.ending.batch_keys(batch_id)

    def _script_args(self, batch_id: str) -> list[Any]:
        return batch_args(batch_id)

    async def index(self, jobs: list[str], flag: str = "", ms: int | None = None) -> None:
        """Put shard jobs in the control plane's index, lapsing `ms` from now (the lease) on its clock."""
        if jobs:
            await self._index([self.keys.jobs], [flag, self.lease_ms if ms is None else ms, *jobs])

    def _renew_args(self, batch_id: str, job: str) -> list[str | int]:
        args: list[str | int] = [job, self.lease_ms, self.live_ms]
        if self.ending.one_node:  # the renewal's share of the counts goes in its own script
            args += [batch_id, self.keys.unfinished]
        return args

    async def renew(self, batch_id: str, job: str) -> bool:
        """Renew a shard job's lease (and keep its batch alive); False when the lease was taken over."""
        reply = await self._renew(batch_keys(self.keys, batch_id), self._renew_args(batch_id, job))
        return await self._renewed(batch_id, job, cast(list[Any], reply))

    async def _renewed(self, batch_id: str, job: str, reply: list[Any], index: bool = True) -> bool:
        if not int(reply[0]):
            return False
        # The batch's lease first: the index only tells the sweep where to look, and a lagging one costs a look. The
        # index (control plane) and the tenant's counts (its slot) go together: one round trip's wait, not two.
        due, unfinished, stored = int(reply[1]), reply[2].decode(), reply[3].decode()
        steps = [self.index([job])] if index else []
        if due > 0 or stored:
            steps.append(self.ending.count_down(batch_id, due, unfinished, stored, self.live_ms))
        await asyncio.gather(*steps)
        return True

    async def start(self, batch_id: str, job: str, worker: str) -> JobStart:
        """A shard job's start in one round trip: its lease renewed and its batch kept alive (as `renew`), the
        worker noted as its runner, the batch's meta and `questions` setting read. The jobs index is not moved
        here: the caller moves it beside its first claim (`index`), since the index only tells the sweep where to
        look."""
        renewal = self._renew_args(batch_id, job)
        renewal += [""] * (5 - len(renewal))
        args = [*renewal, worker, *META_FIELDS]
        renewed, meta, questions = cast(list[Any], await self._start(batch_keys(self.keys, batch_id), args))
        return JobStart(await self._renewed(batch_id, job, renewed, index=False), parse_meta(meta), questions)

    async def release(self, batch_id: str, job: str, ran: Mapping[int, int] | None = None, ended: bool = False) -> str:
        """A shard job ran out of items: drop its lease. Claims it still holds go to a replacement job ('replaced':
        the caller queues it): as never dispatched (their replies were lost: Redis stopped before answering), except
        those in `ran` (index: Claim.flag), the claims it ran whose records a failover lost, which go on recovered.
        `ran` need only name the calls that may not run twice (writes sent, claims recovered). `ended`: the job saw
        its batch end, so no replacement can follow (an ended batch grants none) and none is indexed first."""
        new_job = shards.job_id(*_next_generation(job))
        return await self.take_over(batch_id, job, new_job, mode="2", ran=ran, ended=ended)

    async def take_over(
        self,
        batch_id: str,
        job: str,
        new_job: str,
        force: bool = False,
        never_dispatched: list[int] | None = None,
        mode: str | None = None,
        ran: Mapping[int, int] | None = None,
        ended: bool = False,
    ) -> str:
        """Hand a shard job's in-flight items to a replacement job (leased to `new_job`, which the caller queues).

        Without force, only when the job's lease has lapsed. Returns 'replaced' when the caller must queue
        `new_job`; 'gone', 'alive', 'queued', 'released' or 'done' when not. `ended`: the caller saw the batch end
        (`release`)."""
        clean = ",".join(str(i) for i in never_dispatched or [])
        named = ",".join(f"{index}:{flag}" for index, flag in (ran or {}).items() if flag)
        mode = mode or ("1" if force else "0")
        queued = "0"
        if mode == "0":
            arq_keys = [self.keys.queue, self.keys.arq_in_progress(job)]
            queued = str(int(await self._queued(arq_keys, [job])))
        # The replacement is in the index before the batch grants it a lease: a crash after the grant leaves it to
        # lapse there and be taken over in turn; an entry the grant never followed is dropped below, or by the sweep
        # that finds no such lease. A batch known to have ended grants none.
        if not ended:
            await self.index([new_job], "NX")
        args = [*self._script_args(batch_id), job, new_job, self.lease_ms, mode, self.live_ms, clean, queued, named]
        raw_outcome, raw_ms = cast(list[Any], await self._take_over(self._script_keys(batch_id), args))
        outcome = str(raw_outcome.decode())
        unneeded = [] if outcome == "replaced" or ended else [new_job]  # an entry the grant never followed
        if outcome in ("alive", "queued"):
            await asyncio.gather(self.control.zrem(self.keys.jobs, *unneeded), self.index([job], "", int(raw_ms)))
        elif outcome == "gone":
            await self.control.zrem(self.keys.jobs, job, *unneeded)
        else:
            async with self.control.pipeline(transaction=True) as pipe:
                pipe.zrem(self.keys.jobs, job, *unneeded)
                pipe.zrem(self.keys.queue, job)
                pipe.delete(self.keys.arq_job(job), self.keys.arq_in_progress(job))
                await pipe.execute()
            if outcome == "done":
                await self.ending.ended(batch_id)
        return outcome

    async def lapsed_jobs(self, limit: int = 100) -> list[str]:
        """Shard jobs whose lease has lapsed in the control plane's index (on its clock)."""
        seconds, micros = await self.control.time()
        now_ms = seconds * 1000 + micros // 1000
        raw = await self.control.zrangebyscore(self.keys.jobs, "-inf", now_ms, start=0, num=limit)
        return [member.decode() for member in raw]

    async def cancel(self, batch_id: str) -> CancelOutcome:
        """Stop a batch: nothing more starts; it ends when its calls in flight end (BatchAlreadyFinished if over)."""
        reply = await self._cancel(self._script_keys(batch_id), self._script_args(batch_id))
        outcome, status = (v.decode() for v in reply)
        if outcome == "missing":
            raise BatchNotFound(batch_id)
        if outcome == "finished":
            raise BatchAlreadyFinished(batch_id, status)
        if outcome == "ended":
            await self.ending.ended(batch_id)
        else:
            await self.control.publish(self.keys.cancel_channel, batch_id)
        return CancelOutcome(outcome, BatchStatus(status))

    async def expire(self, batch_id: str) -> str:
        """Apply a batch's deadline if it has passed; returns the script's outcome."""
        outcome = cast(bytes, await self._expire(self._script_keys(batch_id), self._script_args(batch_id))).decode()
        if outcome in TERMINAL_VALUES:
            await self.ending.ended(batch_id)  # nothing to settle when it had ended before
        if outcome == "missing" or outcome in TERMINAL_VALUES:
            await self.control.zrem(self.keys.deadlines, batch_id)
        return outcome

    async def due_deadlines(self, limit: int = 100) -> list[str]:
        """Batches whose deadline has passed and which have not ended yet."""
        now_ms = int(time.time() * 1000)
        raw = await self.control.zrangebyscore(self.keys.deadlines, "-inf", now_ms, start=0, num=limit)
        return [member.decode() for member in raw]
