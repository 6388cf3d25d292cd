"""Storing a submitted batch (all of it or nothing), and removing one that could not be queued."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_batch.keys import Keys
from mcp_batch.models import BackendLimits, BatchRequest
from mcp_batch.store.admission import (
    BATCH_ADMIT,
    CONTROL_ADMIT,
    TENANT_ADMIT,
    batch_admit_call,
    check_admitted,
    control_args,
    control_keys,
    queue_undo_tenant,
    tenant_args,
    tenant_keys,
    undo_control,
)
from mcp_batch.store.batch_row import LIMITS, BatchRow, dump_specs, load_metadata, new_row, stored_row
from mcp_batch.store.chain import chain_call, chained
from mcp_batch.store.connection import atomic
from mcp_batch.store.intake import STAGE_OVER, Encoded, encode, stage
from mcp_batch.store.placement import Placement
from mcp_batch.store.queue import ENQUEUE, QueueStep
from mcp_batch.tenants import DEFAULT_TENANT

logger = logging.getLogger(__name__)

UNCAPPED = 2**62  # a ceiling no count reaches


@dataclass(frozen=True)
class Created:
    """A batch just stored: its id, its row as a read right after would see it, and whether its jobs were queued
    in the same step (`Submits.create`'s `queue`)."""

    batch_id: str
    row: BatchRow
    queued: bool = False


class Submits:
    """Creates and deletes batches, and counts the unfinished items backpressure looks at."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        retention_seconds: int,
        response_max_bytes: int,
        lease_ms: int,
        live_ms: int,
        control: Redis | None = None,
    ) -> None:
        self.redis = redis
        self.control = redis if control is None else control
        self.keys = keys
        self.retention_seconds = retention_seconds
        self.response_max_bytes = response_max_bytes
        self.lease_ms = lease_ms
        self.live_ms = live_ms
        self._control_admit = self.control.register_script(CONTROL_ADMIT)
        self._tenant_admit = redis.register_script(TENANT_ADMIT)
        self._batch_admit = redis.register_script(BATCH_ADMIT)
        # Both planes one Redis (as Ending.one_node): a submit's steps and its jobs' queueing are one script.
        self._one_node = self.control is redis
        self._in_one = redis.register_script(chained(CONTROL_ADMIT, TENANT_ADMIT, BATCH_ADMIT, ENQUEUE))
        self._placement = Placement(redis)

    def new_id(self) -> str:
        """A fresh, unguessable id for a batch about to be created: on a cluster, one that spreads batches evenly
        over its masters (placement.py)."""
        return self._placement.new_id()

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
        queue: QueueStep | None = None,
    ) -> Created:
        """Store a validated batch atomically (one script per slot): all of it, or nothing. `jobs`: its shard jobs,
        leased from now (a job lost before it is queued is taken over when its lease lapses); `traceparent`, the
        submit's span, is the parent of the workers' spans. `settings_from`: a retry's, each setting it kept and the
        batch it came from. `queue`: the jobs' queueing (JobQueue.step_to_wake), sent in the same round trip as the
        steps where the control plane is the data plane's one node (`Created.queued`); else the caller queues them.

        The ceilings, checked in the same atomic step that stores the batch (nothing is stored past one, and a 429
        after `retry_after` is raised): `max_unfinished_items`, the service's unfinished items, and
        `tenant_max_unfinished_items`, the tenant's (Backpressure); `max_stored_bytes`, the bytes of calls the
        tenant's living batches hold (StoredBytesCeiling; None: counted, not capped)."""
        batch_id = batch_id or self.new_id()
        jobs = jobs or []
        keys = self.keys
        staged = len(request.calls) > STAGE_OVER  # written ahead: packing one huge step would hold the event loop
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
        n = len(request.calls)
        taken = [False, False]  # what the control and tenant steps reserved (admission.py): a failure takes it back
        written = staged  # the batch's own keys may exist
        try:
            webhook = self.live_ms if request.webhook_url else None
            control = control_args(batch_id, n, max_unfinished_items, self.lease_ms, deadline, webhook, jobs)
            created_us = _micros(now)
            mine = tenant_args(
                batch_id, n, tenant_max_unfinished_items, stored, max_stored_bytes, self.live_ms, created_us
            )
            steps = [(control_keys(keys), control), (tenant_keys(keys, tenant, request.metadata), mine)]
            timing, calls = (self.live_ms, self.lease_ms), (encoded.specs, encoded.ids)
            stored_step = batch_admit_call(keys, batch_id, timing, jobs, fields, calls)
            if queue is not None and self._one_node:
                try:
                    replies = await self._in_one(*chain_call([*steps, stored_step, (queue.keys, queue.args)]))
                except BaseException:
                    written = True  # it may have run: its batch goes (its counts stay a little high, as after a crash)
                    raise
                # A step runs only once the one before it reserved: the control step's refusal comes first.
                taken = [len(replies) > 1, len(replies) > 2]
                for reply in replies[:2]:
                    check_admitted(reply, stored, ceilings, retry_after)
                return Created(batch_id, stored_row(fields).as_of(time.time()), queued=True)
            # The two slots' steps go together: one round trip's wait. The control step's refusal is told first.
            replies = await asyncio.gather(
                self._control_admit(*steps[0]), self._tenant_admit(*steps[1]), return_exceptions=True
            )
            taken = [not isinstance(reply, BaseException) and int(reply[0]) == 0 for reply in replies]
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
                check_admitted(reply, stored, ceilings, retry_after)
            written = True
            await self._batch_admit(*stored_step)
        except BaseException:
            undo = (taken[0], taken[1], written)
            await self._take_back(batch_id, (tenant, request.metadata), jobs, (n, stored), undo)
            raise
        return Created(batch_id, stored_row(fields).as_of(time.time()))

    async def _take_back(
        self,
        batch_id: str,
        owner: tuple[str, Mapping[str, str] | None],
        jobs: list[str],
        counted: tuple[int, int],
        taken: tuple[bool, bool, bool],
    ) -> None:
        """Undo what a refused or failed submit did, batch first (best effort: Redis may be what failed); `owner`:
        its tenant and metadata, `counted`: its calls and stored bytes, `taken`: whether the control step and the
        tenant's step reserved, and whether the batch's keys may exist."""
        tenant, metadata = owner
        control, tenants, written = taken
        try:
            if written:
                async with self.redis.pipeline(transaction=atomic(self.redis)) as pipe:
                    pipe.delete(*self.keys.batch_keys(batch_id))
                    await pipe.execute()
            if tenants:
                async with self.redis.pipeline(transaction=atomic(self.redis)) as pipe:
                    queue_undo_tenant(pipe, self.keys, tenant, batch_id, counted, metadata)
                    await pipe.execute()
            if control:
                await undo_control(self.control, self.keys, batch_id, counted[0], jobs)
        except (RedisError, OSError):
            logger.warning("could not take back the reservation of batch %s", batch_id)

    async def unfinished_items(self, tenant: str | None = None) -> int:
        """Items of unfinished batches not yet finished, across all batches or one tenant's (for backpressure)."""
        if tenant is None:
            raw = await cast(Awaitable[bytes | None], self.control.get(self.keys.unfinished))
        else:
            raw = await cast(Awaitable[bytes | None], self.redis.get(self.keys.tenant_unfinished(tenant)))
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
        await self.redis.delete(*keys.batch_keys(batch_id))
        if tenant is not None:
            async with self.redis.pipeline(transaction=atomic(self.redis)) as pipe:
                metadata = load_metadata(None if raw_metadata is None else raw_metadata.decode())
                counted = (None if total is None else int(total), _int(size))
                queue_undo_tenant(pipe, keys, tenant, batch_id, counted, metadata)
                await pipe.execute()
        await undo_control(self.control, keys, batch_id, 0 if total is None else int(total), jobs)


def _micros(ts: float) -> int:
    """Epoch seconds in µs, rounded as `created_at` shows them (datetime's rounding), so a list filter that names a
    batch's own `created_at` excludes or includes that batch exactly."""
    shown = datetime.fromtimestamp(ts, UTC)
    return round(shown.replace(microsecond=0).timestamp()) * 1_000_000 + shown.microsecond


def _int(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw)
