"""Storing a submitted batch (all of it or nothing), and removing one that could not be queued."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Mapping
from typing import cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.models import BackendLimits, BatchRequest
from mcp_batch.store.batch_row import LIMITS, dump_specs, new_row
from mcp_batch.store.intake import CHUNK, STAGE_OVER, Encoded, encode, reserve, stage
from mcp_batch.store.scripts import RESERVE_STORED
from mcp_batch.tenants import DEFAULT_TENANT


def new_batch_id() -> str:
    """A fresh, unguessable batch id."""
    return uuid.uuid4().hex


class Submits:
    """Creates and deletes batches, and counts the unfinished items backpressure looks at."""

    def __init__(
        self, redis: Redis, keys: Keys, retention_seconds: int, response_max_bytes: int, lease_ms: int, live_ms: int
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.retention_seconds = retention_seconds
        self.response_max_bytes = response_max_bytes
        self.lease_ms = lease_ms
        self.live_ms = live_ms
        self._reserve = redis.register_script(RESERVE_STORED)

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
        traceparent: str | None = None,
        max_stored_bytes: int | None = None,
        retry_after: int = 5,
        settings_from: Mapping[str, str] | None = None,
    ) -> str:
        """Store a validated batch atomically (MULTI/EXEC): all of it, or nothing. `jobs` are its shard jobs,
        leased from now (a job lost before it is queued is taken over when its lease lapses); `traceparent`, the
        submit's span, is the parent of the workers' spans. `settings_from`: a retry's, each setting it kept and the
        batch it came from.

        `max_stored_bytes`: the tenant's ceiling on the bytes of calls its living batches hold; past it nothing is
        stored (StoredBytesCeiling, a 429 after `retry_after`)."""
        batch_id = batch_id or new_batch_id()
        jobs = jobs or []
        keys = self.keys
        meta, calls, ids_key = keys.batch(batch_id), keys.calls(batch_id), keys.ids(batch_id)
        staged = len(request.calls) > STAGE_OVER  # written ahead: packing one huge MULTI would hold the event loop
        encoded = Encoded([], []) if staged else await encode(request.calls, dump_specs)
        stored = await stage(self.redis, keys, batch_id, request.calls, dump_specs) if staged else encoded.stored
        if max_stored_bytes is not None:
            try:
                await reserve(self._reserve, keys, tenant, batch_id, stored, max_stored_bytes, retry_after)
            except BaseException:
                if staged:  # nothing is left of a batch refused
                    await self.redis.delete(calls, ids_key)
                raise
        now = time.time()
        fields = new_row(
            request,
            now=now,
            max_concurrency=max_concurrency,
            shards=len(jobs) or 1,
            limits=LIMITS.dump_json(limits or {}).decode(),
            response_max_bytes=request.response_max_bytes or self.response_max_bytes,
            retention=request.retention_seconds or self.retention_seconds,
            tenant=tenant,
            tenant_unfinished=keys.tenant_unfinished(tenant),
            rate_share=rate_share,
            links={
                "retry_of": retry_of,
                "settings_from": None if settings_from is None else json.dumps(dict(settings_from)),
                "idempotency_key": idempotency_key,
                "webhook_url": request.webhook_url,
                "traceparent": traceparent,
            },
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(meta, mapping=fields)
            for start in range(0, len(encoded.specs), CHUNK):
                specs, ids = encoded.chunk(start)
                pipe.rpush(calls, *specs)
                pipe.hset(ids_key, items=ids)
            for key in (meta, calls, ids_key):
                pipe.pexpire(key, self.live_ms)
            pipe.incrby(keys.unfinished, len(request.calls))
            pipe.incrby(keys.tenant_unfinished(tenant), len(request.calls))
            pipe.zadd(keys.tenant_batches(tenant), {batch_id: int(now * 1_000_000)})
            pipe.hset(keys.tenant_stored(tenant), batch_id, f"{stored}|0")  # stored: counted while it lives
            if jobs:
                pipe.zadd(keys.jobs, dict.fromkeys(jobs, int(now * 1000) + self.lease_ms))
            if request.deadline_seconds is not None:
                pipe.zadd(keys.deadlines, {batch_id: int((now + request.deadline_seconds) * 1000)})
            await pipe.execute()
        return batch_id

    async def unfinished_items(self, tenant: str | None = None) -> int:
        """Items of unfinished batches not yet finished, across all batches or one tenant's (for backpressure)."""
        key = self.keys.unfinished if tenant is None else self.keys.tenant_unfinished(tenant)
        raw = await cast(Awaitable[bytes | None], self.redis.get(key))
        return int(raw or 0)

    async def delete(self, batch_id: str, jobs: list[str]) -> None:
        """Remove a batch that could not be queued, and what it added to the shared keys."""
        keys = self.keys
        total, tenant = await cast(
            Awaitable[list[bytes | None]], self.redis.hmget(keys.batch(batch_id), ["total", "tenant"])
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(*keys.batch_keys(batch_id))
            if total is not None:
                pipe.decrby(keys.unfinished, int(total))
            if total is not None and tenant is not None:
                pipe.decrby(keys.tenant_unfinished(tenant.decode()), int(total))
                pipe.zrem(keys.tenant_batches(tenant.decode()), batch_id)
                pipe.hdel(keys.tenant_stored(tenant.decode()), batch_id)
            if jobs:
                pipe.zrem(keys.jobs, *jobs)
            pipe.zrem(keys.deadlines, batch_id)
            await pipe.execute()
