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
from mcp_batch.store.admission import ADMIT, admit_keys, check_admitted, queue_admit
from mcp_batch.store.batch_row import LIMITS, dump_specs, load_metadata, new_row
from mcp_batch.store.intake import CHUNK, STAGE_OVER, Encoded, encode, stage
from mcp_batch.tenants import DEFAULT_TENANT

UNCAPPED = 2**62  # a ceiling no count reaches


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
        self._admit = redis.register_script(ADMIT)

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
        max_unfinished_items: int = UNCAPPED,
        tenant_max_unfinished_items: int | None = None,
        settings_from: Mapping[str, str] | None = None,
    ) -> str:
        """Store a validated batch atomically (MULTI/EXEC): all of it, or nothing. `jobs` are its shard jobs,
        leased from now (a job lost before it is queued is taken over when its lease lapses); `traceparent`, the
        submit's span, is the parent of the workers' spans. `settings_from`: a retry's, each setting it kept and the
        batch it came from.

        The ceilings, checked in the same atomic step that stores the batch (nothing is stored past one, and a 429
        after `retry_after` is raised): `max_unfinished_items`, the service's unfinished items, and
        `tenant_max_unfinished_items`, the tenant's (Backpressure); `max_stored_bytes`, the bytes of calls the
        tenant's living batches hold (StoredBytesCeiling; None: counted, not capped)."""
        batch_id = batch_id or new_batch_id()
        jobs = jobs or []
        keys = self.keys
        calls, ids_key = keys.calls(batch_id), keys.ids(batch_id)
        staged = len(request.calls) > STAGE_OVER  # written ahead: packing one huge MULTI would hold the event loop
        encoded = Encoded([], []) if staged else await encode(request.calls, dump_specs)
        stored = await stage(self.redis, keys, batch_id, request.calls, dump_specs) if staged else encoded.stored
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
            tenant_counts=(keys.tenant_unfinished(tenant), keys.tenant_stored_until(tenant)),
            rate_share=rate_share,
            links={
                "retry_of": retry_of,
                "settings_from": None if settings_from is None else json.dumps(dict(settings_from)),
                "idempotency_key": idempotency_key,
                "webhook_url": request.webhook_url,
                "questions": None if request.questions is None else request.questions.model_dump_json(),
                "traceparent": traceparent,
            },
        )
        ceilings = (max_unfinished_items, tenant_max_unfinished_items, max_stored_bytes)
        deadline = None if request.deadline_seconds is None else int((now + request.deadline_seconds) * 1000)
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                for start in range(0, len(encoded.specs), CHUNK):
                    specs, ids = encoded.chunk(start)
                    pipe.rpush(calls, *specs)
                    pipe.hset(ids_key, items=ids)
                await queue_admit(
                    self._admit,
                    pipe,
                    admit_keys(keys, batch_id, tenant, request.metadata),
                    batch_id=batch_id,
                    calls=len(request.calls),
                    stored=stored,
                    ceilings=ceilings,
                    timing=(self.live_ms, self.lease_ms, int(now * 1_000_000), deadline),
                    jobs=jobs,
                    fields=fields,
                )
                replies = await pipe.execute()
        except BaseException:
            if staged:  # nothing is left of a batch that could not be stored
                await self.redis.delete(calls, ids_key)
            raise
        check_admitted(replies[-1], stored, ceilings, retry_after)
        return batch_id

    async def unfinished_items(self, tenant: str | None = None) -> int:
        """Items of unfinished batches not yet finished, across all batches or one tenant's (for backpressure)."""
        key = self.keys.unfinished if tenant is None else self.keys.tenant_unfinished(tenant)
        raw = await cast(Awaitable[bytes | None], self.redis.get(key))
        return int(raw or 0)

    async def delete(self, batch_id: str, jobs: list[str]) -> None:
        """Remove a batch that could not be queued, and what it added to the shared keys."""
        keys = self.keys
        total, raw_tenant, raw_metadata = await cast(
            Awaitable[list[bytes | None]], self.redis.hmget(keys.batch(batch_id), ["total", "tenant", "metadata"])
        )
        tenant = raw_tenant.decode() if raw_tenant is not None else None
        size = None
        if tenant is not None:
            size = await cast(Awaitable[bytes | None], self.redis.hget(keys.tenant_stored_sizes(tenant), batch_id))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(*keys.batch_keys(batch_id))
            if total is not None:
                pipe.decrby(keys.unfinished, int(total))
            if total is not None and tenant is not None:
                pipe.decrby(keys.tenant_unfinished(tenant), int(total))
                pipe.zrem(keys.tenant_batches(tenant), batch_id)
                for key, value in load_metadata(None if raw_metadata is None else raw_metadata.decode()).items():
                    pipe.zrem(keys.tenant_metadata(tenant, key, value), batch_id)
            if tenant is not None and size is not None:  # its bytes are released now, not when it would expire
                pipe.decrby(keys.tenant_stored_bytes(tenant), int(size))
                pipe.hdel(keys.tenant_stored_sizes(tenant), batch_id)
                pipe.zrem(keys.tenant_stored_until(tenant), batch_id)
            if jobs:
                pipe.zrem(keys.jobs, *jobs)
            pipe.zrem(keys.deadlines, batch_id)
            await pipe.execute()
