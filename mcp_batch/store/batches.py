"""The batch store: create, advance (finish one item and claim the next), load, wait. `Store` also takes in
lifecycle.py (leases and take-overs, cancel, deadlines) and tenant_index.py (a tenant's batches). Batch keys are
written only here and by the scripts; retry.py, progress.py and webhook_queue.py read some of them (or, for
webhooks, their own fields), each saying so.

Items are claimed through a cursor (`claimed`) rather than a list of pending indexes, so a batch of any size costs
O(1) to queue; an item's state is derived: a result record means finished, an index below the cursor without one
means running, above it pending (or skipped, cancelled, expired once the batch halts). Finishing and claiming are
one Lua script (see scripts.py), so a worker makes one Redis round trip per item, and a result is counted exactly
once. Each claimed item is noted against the shard job that holds it, so a job whose lease lapses (its worker
died) can hand exactly its in-flight items to a replacement.
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

from mcp_batch.contract.document import LIMITS, render, spec_fields
from mcp_batch.errors import BatchNotFound, ItemNotFound
from mcp_batch.keys import LIVE_TTL_SECONDS, Keys
from mcp_batch.models import (
    FAILED_ITEM,
    TERMINAL_BATCH,
    BackendLimits,
    BatchDocument,
    BatchRequest,
    BatchStatus,
    Call,
    ItemResult,
    ItemStatus,
    Mode,
)
from mcp_batch.ops.outage import with_redis_retry
from mcp_batch.store import scripts
from mcp_batch.store.channels import Listener
from mcp_batch.store.leases import Lifecycle
from mcp_batch.store.tenant_index import TenantIndex
from mcp_batch.tenants import DEFAULT_TENANT

_CHUNK = 1_000  # calls per RPUSH, so one huge batch is not one huge command


def _spec(index: int, call: Call) -> dict[str, Any]:
    spec: dict[str, Any] = {"id": call.id or str(index), "server": call.server, "tool": call.tool}
    spec["arguments"] = call.arguments
    if call.timeout_seconds is not None:
        spec["timeout_seconds"] = call.timeout_seconds
    return spec


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
    timeout_seconds: float | None = None  # the call's own timeout, when it set one
    recovered: bool = False  # taken over from a stopped worker, possibly after it reached the backend


@dataclass(frozen=True)
class BatchMeta:
    """What a worker needs to schedule a batch."""

    mode: Mode
    max_concurrency: int
    status: BatchStatus
    read_only: bool
    created_at: float
    shards: int
    deadline_at: float | None
    tenant: str = DEFAULT_TENANT
    rate_share: float | None = None


class Store(Lifecycle, TenantIndex):
    """Batch persistence over one Redis connection pool."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        retention_seconds: int,
        done: Listener | None = None,
        response_max_bytes: int = 300_000,
        lease_seconds: float = 30.0,
        outage_seconds: float = 300.0,
    ) -> None:
        self.redis = redis
        self.response_max_bytes = response_max_bytes
        self.keys = keys
        self.retention_seconds = retention_seconds
        self.lease_ms = int(lease_seconds * 1000)
        self.live_ms = LIVE_TTL_SECONDS * 1000
        self._done = done  # the API's listener on the done channel; workers do not wait
        self._advance = redis.register_script(scripts.ADVANCE)
        self._take_over = redis.register_script(scripts.TAKE_OVER)
        self._cancel = redis.register_script(scripts.CANCEL)
        self._expire = redis.register_script(scripts.EXPIRE)
        self._renew = redis.register_script(scripts.RENEW)
        self._pending: list[tuple[list[str], list[Any], asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.outage_seconds = outage_seconds  # how long advance() waits out a Redis outage before failing

    async def create(
        self,
        request: BatchRequest,
        max_concurrency: int,
        limits: dict[str, BackendLimits] | None = None,
        batch_id: str | None = None,
        jobs: list[str] | None = None,
        retry_of: str | None = None,
        idempotency_key: str | None = None,
        tenant: str = DEFAULT_TENANT,
        rate_share: float | None = None,
    ) -> str:
        """Store a validated batch atomically (MULTI/EXEC): all of it, or nothing. `jobs` are its shard jobs,
        leased from now (a job lost before it is queued is taken over when its lease lapses)."""
        batch_id = batch_id or new_batch_id()
        jobs = jobs or []
        links = {"retry_of": retry_of, "idempotency_key": idempotency_key}  # meta fields written only when given
        links["webhook_url"] = request.webhook_url  # finalize queues the batch's webhook when this is set
        meta, calls = self.keys.batch(batch_id), self.keys.calls(batch_id)
        specs = [json.dumps(_spec(i, c)) for i, c in enumerate(request.calls)]
        now = time.time()
        fields: dict[str, Any] = {
            "status": BatchStatus.queued.value,
            "mode": request.mode.value,
            "on_error": request.on_error.value,
            "max_concurrency": max_concurrency,
            "shards": len(jobs) or 1,
            "total": len(specs),
            "claimed": 0,
            "finished": 0,
            "created_at": repr(now),
            "limits": LIMITS.dump_json(limits or {}),
            "read_only": int(request.read_only),
            "response_max_bytes": request.response_max_bytes or self.response_max_bytes,
            "retention": request.retention_seconds or self.retention_seconds,
            "tenant": tenant,
            "tenant_unfinished": self.keys.tenant_unfinished(tenant),
        }
        if rate_share is not None:
            fields["rate_share"] = repr(rate_share)
        if request.deadline_seconds is not None:
            fields["deadline_at"] = repr(now + request.deadline_seconds)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(meta, mapping=fields | {f: v for f, v in links.items() if v is not None})
            ids = [(c.id or str(i), i) for i, c in enumerate(request.calls)]
            for start in range(0, len(specs), _CHUNK):
                pipe.rpush(calls, *specs[start : start + _CHUNK])
                pipe.hset(self.keys.ids(batch_id), mapping=dict(ids[start : start + _CHUNK]))
            for key in (meta, calls, self.keys.ids(batch_id)):
                pipe.pexpire(key, self.live_ms)
            pipe.incrby(self.keys.unfinished, len(specs))
            pipe.incrby(self.keys.tenant_unfinished(tenant), len(specs))
            pipe.zadd(self.keys.tenant_batches(tenant), {batch_id: int(now * 1_000_000)})
            if jobs:
                pipe.zadd(self.keys.jobs, dict.fromkeys(jobs, int(now * 1000) + self.lease_ms))
            if request.deadline_seconds is not None:
                pipe.zadd(self.keys.deadlines, {batch_id: int((now + request.deadline_seconds) * 1000)})
            await pipe.execute()
        return batch_id

    async def unfinished_items(self, tenant: str | None = None) -> int:
        """Items of unfinished batches not yet finished, across all batches or one tenant's (for backpressure)."""
        key = self.keys.unfinished if tenant is None else self.keys.tenant_unfinished(tenant)
        raw = await cast(Awaitable[bytes | None], self.redis.get(key))
        return int(raw or 0)

    async def delete(self, batch_id: str, jobs: list[str]) -> None:
        """Remove a batch that could not be queued, and what it added to the shared keys."""
        total, tenant = await cast(
            Awaitable[list[bytes | None]], self.redis.hmget(self.keys.batch(batch_id), ["total", "tenant"])
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(*self.keys.batch_keys(batch_id))
            if total is not None:
                pipe.decrby(self.keys.unfinished, int(total))
            if total is not None and tenant is not None:
                pipe.decrby(self.keys.tenant_unfinished(tenant.decode()), int(total))
                pipe.zrem(self.keys.tenant_batches(tenant.decode()), batch_id)
            if jobs:
                pipe.zrem(self.keys.jobs, *jobs)
            pipe.zrem(self.keys.deadlines, batch_id)
            await pipe.execute()

    async def status(self, batch_id: str) -> BatchStatus:
        raw = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.batch(batch_id), "status"))
        if raw is None:
            raise BatchNotFound(batch_id)
        return BatchStatus(raw.decode())

    async def meta(self, batch_id: str) -> BatchMeta:
        fields = [
            "mode",
            "max_concurrency",
            "status",
            "read_only",
            "created_at",
            "shards",
            "deadline_at",
            "tenant",
            "rate_share",
        ]
        raw = await cast(Awaitable[list[bytes | None]], self.redis.hmget(self.keys.batch(batch_id), fields))
        if raw[0] is None:
            raise BatchNotFound(batch_id)
        mode, concurrency, status, read_only, created, count = (cast(bytes, value).decode() for value in raw[:6])
        return BatchMeta(
            Mode(mode),
            int(concurrency),
            BatchStatus(status),
            read_only == "1",
            float(created),
            int(count),
            None if raw[6] is None else float(raw[6]),
            DEFAULT_TENANT if raw[7] is None else raw[7].decode(),
            None if raw[8] is None else float(raw[8]),
        )

    async def advance(
        self, batch_id: str, job: str, finished: tuple[Claim, dict[str, Any]] | None, want_next: bool
    ) -> Claim | None:
        """Record a finished item (if any) and claim the next one (if wanted and allowed), in one round trip.
        None when there is nothing to claim: the batch is done, halted, or this job's lease was taken over.

        Calls made in the same event-loop turn (lanes finishing together) share one pipelined round trip.
        """
        args = self._script_args(batch_id)
        if finished is not None:
            claim, record = finished
            failed = ItemStatus(record["status"]) in FAILED_ITEM
            args += [claim.index, json.dumps(record), record["status"], claim.id, "1" if failed else "0"]
        else:
            args += [-1, "", "", "", "0"]
        args += ["1" if want_next else "0", job, self.live_ms]
        reply = await self._coalesced(self._script_keys(batch_id), args)
        index = int(reply[0])
        if index < 0:
            return None
        spec = json.loads(reply[1])
        return Claim(
            index,
            spec["id"],
            spec["server"],
            spec["tool"],
            spec["arguments"],
            spec.get("timeout_seconds"),
            recovered=int(reply[2]) == 1,
        )

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
        # script records a result with HSETNX). Its claim is not: a call that ran but whose reply was lost claimed
        # an item no lane saw; it stays noted against the job, and release() hands it to a replacement.
        return await with_redis_retry(lambda: self._evalsha_once(calls), outage=self.outage_seconds)

    async def _evalsha_once(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        # EVALSHA on a plain pipeline: redis-py's Script objects make every pipeline ask SCRIPT EXISTS first.
        for attempt in range(2):
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.evalsha(self._advance.sha, len(keys), *keys, *args)
                replies: list[Any] = await pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(r, NoScriptError) for r in replies):
                await self.redis.script_load(scripts.ADVANCE)  # a restarted or flushed Redis lost the script
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

    async def page_facts(self, batch_id: str) -> tuple[int, float | None, BatchStatus]:
        """What reading a page needs first: the batch's response_max_bytes, its deadline and its status."""
        fields = ["response_max_bytes", "deadline_at", "status"]
        raw = await cast(Awaitable[list[bytes | None]], self.redis.hmget(self.keys.batch(batch_id), fields))
        if raw[0] is None or raw[2] is None:
            raise BatchNotFound(batch_id)
        return int(raw[0]), None if raw[1] is None else float(raw[1]), BatchStatus(raw[2].decode())

    async def document(self, batch_id: str, offset: int = 0, limit: int | None = None) -> BatchDocument:
        """Assemble the batch document, building only the results page asked for."""
        meta_k, calls_k, results_k, failed_k = self.keys.batch_keys(batch_id)[:4]
        end = -1 if limit is None else offset + limit - 1
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(meta_k)
            if end < offset and limit is not None:  # limit=0: no page (LRANGE with end -1 would read them all)
                pipe.lrange(calls_k, 1, 0)
            else:
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
