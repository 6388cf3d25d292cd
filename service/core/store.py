"""The only code that reads and writes batch keys: create, advance (finish one item and claim the next), load, wait.

Items are claimed through a cursor (`claimed`) rather than a list of pending indexes, so a batch of any size costs
O(1) to queue; an item's state is derived: a result record means finished, an index below the cursor without one
means running, above it pending (or skipped once `stopped_at` is set). Finishing and claiming are one Lua script,
so a worker makes one Redis round trip per item, and a result is counted exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from .document import LIMITS, render, spec_fields
from .errors import BatchNotFound, ItemNotFound
from .events import Listener
from .keys import Keys
from .models import (
    TERMINAL_BATCH,
    BackendLimits,
    BatchDocument,
    BatchRequest,
    BatchStatus,
    ItemResult,
    Mode,
)
from .retry import with_redis_retry

_CHUNK = 1_000  # calls per RPUSH, so one huge batch is not one huge command

# KEYS: meta, calls, results, failed, finished, ids
# ARGV: index (-1: none), record, status, item id, want ('1'/'0'), now, retention ms, channel, batch id
_ADVANCE = """
local meta, calls, results, failed, finished = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local index, retention = tonumber(ARGV[1]), tonumber(ARGV[7])
if redis.call('EXISTS', meta) == 0 then return {-2} end
if index >= 0 and redis.call('HSETNX', results, index, ARGV[2]) == 1 then
  redis.call('HINCRBY', meta, 'finished', 1)
  redis.call('HINCRBY', meta, 'n:' .. ARGV[3], 1)
  redis.call('PEXPIRE', results, retention)
  redis.call('RPUSH', finished, index)
  redis.call('PEXPIRE', finished, retention)
  if ARGV[3] ~= 'ok' and ARGV[3] ~= 'skipped' then
    redis.call('ZADD', failed, index, ARGV[4])
    redis.call('PEXPIRE', failed, retention)
    if redis.call('HGET', meta, 'on_error') == 'stop' then redis.call('HSETNX', meta, 'stopped_at', index) end
  end
end
local m = redis.call('HMGET', meta, 'status', 'total', 'claimed', 'finished', 'stopped_at')
local status, total, claimed, finished, stopped = m[1], tonumber(m[2]), tonumber(m[3]), tonumber(m[4]), m[5]
if status == 'completed' then return {-1} end
if finished == total or (stopped and finished == claimed) then
  redis.call('HSET', meta, 'status', 'completed', 'finished_at', ARGV[6])
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, retention) end
  redis.call('PUBLISH', ARGV[8], ARGV[9])
  return {-1}
end
if ARGV[5] == '1' and not stopped and claimed < total then
  redis.call('HSET', meta, 'claimed', claimed + 1)
  if status == 'queued' then redis.call('HSET', meta, 'status', 'running', 'started_at', ARGV[6]) end
  redis.call('PEXPIRE', meta, retention)
  redis.call('PEXPIRE', calls, retention)
  redis.call('PEXPIRE', KEYS[6], retention)
  return {claimed, redis.call('LINDEX', calls, claimed)}
end
return {-1}
"""


def new_batch_id() -> str:
    """A fresh, unguessable batch id."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Claim:
    """An item handed to a worker: its index and its call spec."""

    index: int
    id: str
    server: str
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class BatchMeta:
    """What a worker needs to schedule a batch."""

    mode: Mode
    max_concurrency: int
    status: BatchStatus
    read_only: bool
    created_at: float
    shards: int


class Store:
    """Batch persistence over one Redis connection pool."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        retention_seconds: int,
        done: Listener | None = None,
        response_max_bytes: int = 300_000,
        outage_seconds: float = 300.0,
    ) -> None:
        self.redis = redis
        self.response_max_bytes = response_max_bytes
        self.keys = keys
        self.retention_ms = retention_seconds * 1000
        self._done = done  # the API's listener on the done channel; workers do not wait
        self._advance = redis.register_script(_ADVANCE)
        self._pending: list[tuple[list[str], list[Any], asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.outage_seconds = outage_seconds  # how long advance() waits out a Redis outage before failing

    async def create(
        self,
        request: BatchRequest,
        max_concurrency: int,
        limits: dict[str, BackendLimits] | None = None,
        batch_id: str | None = None,
        shards: int = 1,
    ) -> str:
        """Store a validated batch atomically (MULTI/EXEC): all of it, or nothing."""
        batch_id = batch_id or new_batch_id()
        meta, calls = self.keys.batch(batch_id), self.keys.calls(batch_id)
        specs = [
            json.dumps({"id": c.id or str(i), "server": c.server, "tool": c.tool, "arguments": c.arguments})
            for i, c in enumerate(request.calls)
        ]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                meta,
                mapping={
                    "status": BatchStatus.queued.value,
                    "mode": request.mode.value,
                    "on_error": request.on_error.value,
                    "max_concurrency": max_concurrency,
                    "shards": shards,
                    "total": len(specs),
                    "claimed": 0,
                    "finished": 0,
                    "created_at": repr(time.time()),
                    "limits": LIMITS.dump_json(limits or {}),
                    "read_only": int(request.read_only),
                    "response_max_bytes": request.response_max_bytes or self.response_max_bytes,
                },
            )
            ids = [(c.id or str(i), i) for i, c in enumerate(request.calls)]
            for start in range(0, len(specs), _CHUNK):
                pipe.rpush(calls, *specs[start : start + _CHUNK])
                pipe.hset(self.keys.ids(batch_id), mapping=dict(ids[start : start + _CHUNK]))
            for key in (meta, calls, self.keys.ids(batch_id)):
                pipe.pexpire(key, self.retention_ms)
            await pipe.execute()
        return batch_id

    async def delete(self, batch_id: str) -> None:
        """Remove every key of a batch (used when it could not be queued)."""
        await self.redis.delete(*self.keys.batch_keys(batch_id))

    async def status(self, batch_id: str) -> BatchStatus:
        raw = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.batch(batch_id), "status"))
        if raw is None:
            raise BatchNotFound(batch_id)
        return BatchStatus(raw.decode())

    async def meta(self, batch_id: str) -> BatchMeta:
        fields = ["mode", "max_concurrency", "status", "read_only", "created_at", "shards"]
        raw = await cast(Awaitable[list[bytes | None]], self.redis.hmget(self.keys.batch(batch_id), fields))
        if raw[0] is None:
            raise BatchNotFound(batch_id)
        mode, concurrency, status, read_only, created, count = (cast(bytes, value).decode() for value in raw)
        return BatchMeta(
            Mode(mode), int(concurrency), BatchStatus(status), read_only == "1", float(created), int(count)
        )

    async def advance(
        self, batch_id: str, worker: str, finished: tuple[Claim, dict[str, Any]] | None, want_next: bool
    ) -> Claim | None:
        """Record a finished item (if any) and claim the next one (if wanted and allowed), in one round trip.

        Calls made in the same event-loop turn (lanes finishing together) share one pipelined round trip.
        """
        if finished is not None:
            claim, record = finished
            args: list[Any] = [claim.index, json.dumps(record), record["status"], claim.id]
        else:
            args = [-1, "", "", ""]
        args += ["1" if want_next else "0", repr(time.time()), self.retention_ms, self.keys.done_channel, batch_id]
        reply = await self._coalesced(self.keys.batch_keys(batch_id), args)
        index = int(reply[0])
        if index < 0:
            return None
        spec = json.loads(reply[1])
        return Claim(index, spec["id"], spec["server"], spec["tool"], spec["arguments"])

    def _coalesced(self, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((keys, args, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # one loop turn: let every lane that finished in this one join the pipeline
        batch, self._pending, self._flusher = self._pending, [], None
        try:
            replies = await self._evalsha_all([(keys, args) for keys, args, _ in batch])
        except Exception as exc:
            replies = [exc] * len(batch)
        for (_, _, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _evalsha_all(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        # While Redis is down or loading its append-only file, the finished items these calls carry exist only in
        # the worker's memory: wait for Redis rather than drop them. Repeating a call records nothing twice (the
        # script records a result with HSETNX); its claim is not idempotent, though: a call that ran but whose reply
        # was lost claimed an item that no lane will run (README, Redis faults, known gaps).
        return await with_redis_retry(lambda: self._evalsha_once(calls), outage=self.outage_seconds)

    async def _evalsha_once(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        # EVALSHA on a plain pipeline: redis-py's Script objects make every pipeline ask SCRIPT EXISTS first.
        for attempt in range(2):
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.evalsha(self._advance.sha, len(keys), *keys, *args)
                replies: list[Any] = await pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(r, NoScriptError) for r in replies):
                await self.redis.script_load(_ADVANCE)  # a restarted or flushed Redis lost the script
                continue
            break
        return replies

    async def item(self, batch_id: str, item_id: str) -> ItemResult:
        """One item, whole, by its id."""
        raw_index = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.ids(batch_id), item_id))
        if raw_index is None:
            await self.status(batch_id)  # BatchNotFound when the batch itself is gone
            raise ItemNotFound(batch_id, item_id)
        index = int(raw_index)
        async with self.redis.pipeline(transaction=True) as pipe:  # not document(): it reads every failed id
            pipe.hgetall(self.keys.batch(batch_id))
            pipe.lindex(self.keys.calls(batch_id), index)
            pipe.hget(self.keys.results(batch_id), str(index))
            raw_meta, spec, record = await pipe.execute()
        if not raw_meta or spec is None:
            raise BatchNotFound(batch_id)
        meta = {k.decode(): v.decode() for k, v in raw_meta.items()}
        records = {} if record is None else {index: record}
        return render(batch_id, meta, index, [spec], records, []).results[0]

    async def finished_since(
        self, batch_id: str, after: int, end: int | None = None, chunk: int = 500
    ) -> AsyncIterator[list[ItemResult]]:
        """Finished items in finish order, after the `after`-th up to the `end`-th, in chunks; each with its `seq`."""
        finished_k, results_k, calls_k = (
            self.keys.finished(batch_id),
            self.keys.results(batch_id),
            self.keys.calls(batch_id),
        )
        if end is None:
            end = await cast(Awaitable[int], self.redis.llen(finished_k))
        position = after
        while position < end:
            stop = min(end, position + chunk) - 1
            raw = await cast(Awaitable[list[bytes]], self.redis.lrange(finished_k, position, stop))
            indexes = [int(i) for i in raw]
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(results_k, indexes)
                for index in indexes:
                    pipe.lindex(calls_k, index)
                records, *specs = await pipe.execute()
            items = []
            for n, (index, record, spec) in enumerate(zip(indexes, records, specs, strict=True)):
                merged = {"index": index, **spec_fields(spec), **json.loads(record), "seq": position + n + 1}
                items.append(ItemResult.model_validate(merged))
            position += len(indexes)
            yield items

    async def id_index(self, batch_id: str) -> dict[str, int]:
        """Casefolded item id -> index, for resolving references."""
        raw = await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(self.keys.ids(batch_id)))
        return {k.decode().casefold(): int(v) for k, v in raw.items()}

    async def records(self, batch_id: str, indexes: list[int]) -> dict[int, dict[str, Any]]:
        """The stored result records of these items (finished ones only)."""
        raw = await cast(Awaitable[list[bytes | None]], self.redis.hmget(self.keys.results(batch_id), indexes))
        return {i: json.loads(r) for i, r in zip(indexes, raw, strict=True) if r is not None}

    async def finished_count(self, batch_id: str) -> int:
        """How many items have finished (BatchNotFound for an unknown batch)."""
        await self.status(batch_id)
        return await cast(Awaitable[int], self.redis.llen(self.keys.finished(batch_id)))

    async def response_budget(self, batch_id: str) -> int:
        """The batch's response_max_bytes."""
        raw = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.batch(batch_id), "response_max_bytes"))
        if raw is None:
            raise BatchNotFound(batch_id)
        return int(raw)

    async def document(self, batch_id: str, offset: int = 0, limit: int | None = None) -> BatchDocument:
        """Assemble the batch document, building only the results page asked for."""
        meta_k, calls_k, results_k, failed_k = self.keys.batch_keys(batch_id)[:4]
        end = -1 if limit is None else offset + limit - 1
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(meta_k)
            pipe.lrange(calls_k, offset, end)
            if limit is None:
                pipe.hgetall(results_k)
            else:
                pipe.hmget(results_k, list(range(offset, offset + limit)) or [0])
            pipe.zrange(failed_k, 0, -1, withscores=True)
            raw_meta, raw_calls, raw_results, raw_failed = await pipe.execute()
        if not raw_meta:
            raise BatchNotFound(batch_id)
        meta = {k.decode(): v.decode() for k, v in raw_meta.items()}
        if limit is None:
            records = {int(k): v for k, v in raw_results.items()}
        else:
            records = {offset + i: v for i, v in enumerate(raw_results) if v is not None}
        return render(batch_id, meta, offset, raw_calls, records, raw_failed)

    async def wait(self, batch_id: str, timeout: float) -> None:
        """Return when the batch is terminal or `timeout` passes; woken by the done channel, not by polling."""
        if self._done is None:
            raise RuntimeError("this store has no done-channel listener")
        with self._done.watch(batch_id) as event:
            if await self.status(batch_id) in TERMINAL_BATCH or timeout <= 0:
                return
            try:
                async with asyncio.timeout(timeout):
                    await event.wait()
            except TimeoutError:
                return
