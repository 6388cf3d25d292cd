"""Finishing items and claiming the next ones, in one round trip: the worker's hot path through Redis.

Items are claimed through a cursor (`claimed`) rather than a list of pending indexes, so a batch of any size costs
O(1) to queue; finishing and claiming are one Lua script (ADVANCE), so a result is counted exactly once. One call
carries every record a shard job has ready and asks for as many claims as it can use, so the script's fixed cost
(the batch hash read and written once, the lease checked once) is shared by the items it carries.
Each claimed item is noted against the shard job that holds it, so a job whose lease lapses (its worker died) can
hand exactly its in-flight items to a replacement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from mcp_batch.keys import Keys
from mcp_batch.models import FAILED_ITEM
from mcp_batch.records import ItemRecord, dump
from mcp_batch.store.advance import ADVANCE
from mcp_batch.store.batch_row import load_spec
from mcp_batch.store.ending import Ending
from mcp_batch.store.outage import with_redis_retry
from mcp_batch.store.scripts import batch_args

_FAILED = frozenset(status.value for status in FAILED_ITEM)


@dataclass(frozen=True, slots=True)
class Claim:
    """An item handed to a worker: its index and its call spec."""

    index: int
    id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    timeout_seconds: float | None = None  # the call's own timeout, when it set one
    recovered: bool = False  # taken over from a stopped worker, possibly after it reached the backend
    cursor: str | None = None  # read a page of an earlier item instead of calling the backend
    record_lost: bool = False  # recovered: the job that ran it stored its record, and a Redis failover lost it

    @property
    def flag(self) -> int:
        """How the store notes the claim when it goes back to the orphans: 0 never sent, 1 may have been sent
        (recovered), 2 sent and its record lost."""
        return 2 if self.record_lost else int(self.recovered)


@dataclass(frozen=True, slots=True)
class Step:
    """What one finish-and-claim round trip gave: the claims, and whether more may come."""

    claims: list[Claim]
    more: bool  # False: nothing more to claim (the batch is done, halted or gone, or the lease was lost)
    lost: bool = False  # this job's lease was taken over
    next_seq: int | None = None  # the seq the batch's next record takes, as of this step (None: not said)
    ended: bool = False  # this step ended the batch


def _claim(index: Any, raw: bytes, flag: Any) -> Claim:
    spec = load_spec(raw)
    return Claim(
        int(index),
        spec.id,
        spec.server,
        spec.tool,
        spec.arguments,
        spec.timeout_seconds,
        recovered=int(flag) >= 1,
        cursor=spec.cursor,
        record_lost=int(flag) == 2,
    )


def _claims(reply: list[Any]) -> list[Claim]:
    """The claims of ADVANCE's reply: the orphans' (index, spec, flag each), then the cursor's (its first index, then
    a spec each)."""
    end = 4 + 3 * int(reply[3])
    claims = [_claim(*reply[i : i + 3]) for i in range(4, end, 3)]
    first = int(reply[end])
    return claims + [_claim(first + j, raw, 0) for j, raw in enumerate(reply[end + 1 :])]


class Claims:
    """The finish-and-claim script (a shard job's feeder gathers what each call carries)."""

    def __init__(self, redis: Redis, keys: Keys, live_ms: int, outage_seconds: float, ending: Ending) -> None:
        self.redis = redis
        self.ending = ending
        self.keys = keys
        self.live_ms = live_ms
        self.outage_seconds = outage_seconds  # how long a step waits out a Redis outage before failing
        self._advance = ending.script(ADVANCE)

    async def step(
        self,
        batch_id: str,
        job: str,
        finished: Sequence[tuple[Claim, ItemRecord]],
        want: int,
        give_back: Sequence[Claim] = (),
        lanes: tuple[int, int, int] | None = None,
        held: Sequence[Claim] = (),
        seq: int | None = None,
    ) -> Step:
        """Record finished items, give back claims that will not run here (they go to whoever claims next, their
        `recovered` flag kept) and claim up to `want` more, in one round trip.

        `lanes` (busy, waiting, free): the job's lanes with a call, those waiting for a claim, and how many of the
        claims this step gives it may start before its next step (None: not said; readers then count every claim
        running). `held`: claims in hand it keeps unsent until its next step; they and the claims past `free` are
        held unsent (readers count them pending, and a take-over sends them on as never dispatched). `seq`: the seq
        the first of `finished` takes if no other job records one first (the last step's `next_seq`), the next ones
        following; a record whose seq is right is stored as it is sent (None: the store gives every one its seq)."""
        indexes, statuses, failed_ids = [], [], []
        records: list[bytes] = []
        for claim, record in finished:
            status = record["status"]
            indexes.append(claim.index)
            statuses.append(status)
            raw = dump(record)[:-1]  # its closing brace comes after its seq, added here or by the script
            records.append(raw if seq is None else raw + b',"seq":%d}' % (seq + len(records)))
            if status in _FAILED:
                failed_ids.append(claim.id)
        back = ",".join(f"{claim.index}:{claim.flag}" for claim in give_back)
        told = "" if lanes is None else " ".join(map(str, lanes))
        args = [*batch_args(batch_id), job, self.live_ms, want, len(indexes), back, told]
        args += [",".join(str(claim.index) for claim in held), "" if seq is None else seq]
        args += [*indexes, *statuses, *records, *failed_ids]
        reply = await self._evalsha(self.ending.batch_keys(batch_id), args)
        state = int(reply[0])
        if reply[1]:  # this step ended the batch
            await with_redis_retry(lambda: self.ending.ended(batch_id), outage=self.outage_seconds)
        claims = _claims(reply) if len(reply) > 3 else []
        return Step(claims, more=state == 1, lost=state == -3, next_seq=int(reply[2]) or None, ended=bool(reply[1]))

    async def _evalsha(self, keys: list[str], args: list[Any]) -> Any:
        # While Redis is down or loading its append-only file, the finished items a step carries exist only in the
        # worker's memory: wait for Redis rather than drop them. Repeating a step records nothing twice (the script
        # records a result only once). Its claims are not: a step that ran but whose reply was lost claimed items no
        # lane saw; they stay noted against the job, and Leases.release() hands them to a replacement.
        return await with_redis_retry(lambda: self._evalsha_once(keys, args), outage=self.outage_seconds)

    async def _evalsha_once(self, keys: list[str], args: list[Any]) -> Any:
        # EVALSHA itself: redis-py's Script objects ask SCRIPT EXISTS first whenever they run in a pipeline.
        try:
            return await self.redis.evalsha(self._advance.sha, len(keys), *keys, *args)  # type: ignore[misc]
        except NoScriptError:
            await self.redis.script_load(self._advance.script)  # a restarted or flushed Redis lost the script
            return await self.redis.evalsha(self._advance.sha, len(keys), *keys, *args)  # type: ignore[misc]
