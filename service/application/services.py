"""The long-lived objects the API builds at start-up, and submitting a batch through them.

Every front door (the REST routes, the Gumloop-compatible route, the MCP endpoint) submits through `submit`, so a
batch is validated, stored and queued the same way whichever door it came in by.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from arq import ArqRedis

from mcp_batch import shards
from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.limits import LeaseSemaphore, RateLimiter
from mcp_batch.backends.servers_file import Registry
from mcp_batch.contract import budget
from mcp_batch.contract.checks import Bounds, precheck
from mcp_batch.contract.references import may_reference
from mcp_batch.contract.validation import validate_batch
from mcp_batch.contract.webhook_policy import WebhookPolicy
from mcp_batch.errors import Backpressure, BatchNotFound
from mcp_batch.keys import Keys, is_batch_id
from mcp_batch.models import (
    TERMINAL_BATCH,
    BatchDocument,
    BatchList,
    BatchRequest,
    BatchStatus,
    DryRun,
    DryRunItem,
    ItemError,
    ItemResult,
    ItemStatus,
)
from mcp_batch.ops.prometheus import ApiMetrics
from mcp_batch.settings import Settings
from mcp_batch.store import Store, idempotency
from mcp_batch.store.submits import new_batch_id
from mcp_batch.tenants import ANYONE, Caller, authorize
from service.application.retry import retry_request

_LIVE_SECONDS = 15.0  # a worker that beat within this long counts as live (workers beat about once a second)


@dataclass(frozen=True)
class Services:
    """What the lifespan opened, shared by every request."""

    settings: Settings
    keys: Keys
    registry: Registry
    redis: ArqRedis
    store: Store
    catalog: Catalog
    rate: RateLimiter
    leases: LeaseSemaphore
    metrics: ApiMetrics = field(default_factory=ApiMetrics)

    def validate(self, request: BatchRequest, caller: Caller = ANYONE) -> int:
        """Whole-batch checks (InvalidBatch lists every fault, Forbidden what the caller's key may not do); the
        batch's effective max_concurrency."""
        settings = self.settings
        authorize(caller, request)
        secret = settings.webhook_secret
        return validate_batch(
            request,
            min(settings.max_calls_per_batch, caller.max_calls_per_batch or settings.max_calls_per_batch),
            settings.max_concurrency_ceiling,
            settings.default_max_concurrency,
            settings.response_max_bytes_ceiling,
            settings.retention_ceiling_seconds,
            settings.max_call_timeout_seconds,
            WebhookPolicy.build(settings.webhook_allow, secret.get_secret_value() if secret else None),
        )

    async def submit(
        self,
        request: BatchRequest,
        caller: Caller = ANYONE,
        retry_of: str | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Validate the whole batch, store it atomically under the caller's tenant, queue its shard jobs, wake workers.

        `retry_of` (the batch retried) and `idempotency_key` (the name of its key's record) go into the batch's meta.
        Backpressure: past `max_unfinished_items` (the service's, or the caller's key's for its tenant) nothing is
        stored and Backpressure (a 429) is raised."""
        concurrency = self.validate(request, caller)
        settings = self.settings
        retry_after = settings.backpressure_retry_after_seconds
        unfinished = await self.store.submits.unfinished_items()
        if unfinished + len(request.calls) > settings.max_unfinished_items:
            raise Backpressure(unfinished, settings.max_unfinished_items, retry_after)
        if caller.max_unfinished_items is not None:
            mine = await self.store.submits.unfinished_items(caller.tenant)
            if mine + len(request.calls) > caller.max_unfinished_items:
                raise Backpressure(mine, caller.max_unfinished_items, retry_after)
        limits = self.registry.limits({call.server for call in request.calls})
        linked = any(may_reference(call.arguments) for call in request.calls)
        live = await self.redis.zcount(self.keys.workers, (time.time() - _LIVE_SECONDS) * 1000, "+inf")
        count = shards.plan(
            len(request.calls), concurrency, request.mode, linked, live, settings.max_shards, settings.shard_min_items
        )
        batch_id = new_batch_id()
        jobs = [shards.job_id(batch_id, shard) for shard in range(count)]
        await self.store.submits.create(
            request,
            concurrency,
            limits,
            batch_id,
            jobs,
            retry_of=retry_of,
            idempotency_key=idempotency_key,
            tenant=caller.tenant,
            rate_share=caller.rate_share,
        )
        try:
            for shard, job in enumerate(jobs):
                await self.redis.enqueue_job("run_batch", batch_id, shard, _job_id=job, _queue_name=self.keys.queue)
        except BaseException:
            await self.store.submits.delete(
                batch_id, jobs
            )  # nothing half-written: a batch that could not be queued is gone
            raise
        await self.redis.publish(self.keys.wake_channel, batch_id)
        self.metrics.batch_submitted()
        return batch_id

    async def owned(self, batch_id: str, caller: Caller) -> str:
        """The batch id, when the batch exists and is the caller's; else BatchNotFound (another tenant's batch is
        indistinguishable from a missing one). An id that cannot name a batch is never looked up."""
        if not is_batch_id(batch_id) or await self.store.tenants.tenant_of(batch_id) != caller.tenant:
            raise BatchNotFound(batch_id)
        return batch_id

    async def batches(
        self, caller: Caller, status: set[BatchStatus] | None, limit: int, cursor: str | None
    ) -> BatchList:
        """The caller's tenant's batches, newest first, a page at a time."""
        before = int(cursor) if cursor else None
        found, next_before = await self.store.tenants.batches_of(caller.tenant, before, limit, status)
        return BatchList(batches=found, next_cursor=None if next_before is None else str(next_before))

    async def cancel(self, batch_id: str) -> BatchDocument:
        """Cancel a batch (BatchAlreadyFinished when it has ended) and return its document."""
        await self.store.leases.cancel(batch_id)
        return await self.document(batch_id, limit=0)

    async def submit_once(
        self, request: BatchRequest, key: str | None, caller: Caller = ANYONE, retry_of: str | None = None
    ) -> tuple[str, bool]:
        """Submit, unless the Idempotency-Key `key` already made a batch for the same request: (batch id, created).

        Validate, claim the key, store and queue, then record the batch under the key; the key is released if the
        batch could not be stored. The same key with another request: IdempotencyConflict.
        """
        if key is None:
            return await self.submit(request, caller, retry_of), True
        self.validate(request, caller)
        body = request.model_dump(mode="json") if retry_of is None else {"retry_of": retry_of}
        held = await self.store.idempotency.claim(key, idempotency.fingerprint(body), caller.tenant)
        if held.batch_id is not None:
            return held.batch_id, False
        try:
            batch_id = await self.submit(request, caller, retry_of, idempotency_key=held.name)
        except BaseException:
            await self.store.idempotency.release(held)
            raise
        await self.store.idempotency.complete(held, batch_id)
        return batch_id, True

    async def retry(self, batch_id: str, caller: Caller = ANYONE, key: str | None = None) -> tuple[str, bool]:
        """A new batch of the finished batch's items that did not succeed, linked by `retry_of`: (id, created)."""
        request = await retry_request(self.store, batch_id)
        return await self.submit_once(request, key, caller, retry_of=batch_id)

    async def document(self, batch_id: str, offset: int = 0, limit: int | None = None) -> BatchDocument:
        """A page of the document that fits the batch's byte budget: no more items than the budget holds."""
        max_bytes, deadline, status = await self.store.reads.page_facts(batch_id)
        if deadline is not None and deadline <= time.time() and status not in TERMINAL_BATCH:
            await self.store.leases.expire(batch_id)  # workers apply deadlines within a second; this covers no workers
        page = budget.most_items(max_bytes) if limit is None else min(limit, budget.most_items(max_bytes))
        document = await self.store.reads.document(batch_id, offset, page)
        items, removed = budget.fit([item.model_dump(mode="json") for item in document.results], max_bytes)
        document.results = [ItemResult.model_validate(item) for item in items]
        document.truncated, document.truncated_bytes = removed > 0, removed
        return document

    async def dry_run(self, request: BatchRequest, caller: Caller = ANYONE) -> DryRun:
        """Every check a batch would meet, with each call's would-be status; nothing is stored or queued."""
        self.validate(request, caller)
        bounds = Bounds(self.settings.max_argument_bytes, self.settings.max_argument_depth)
        names = {call.server for call in request.calls if call.server in self.registry}
        listed = await asyncio.gather(*(self.catalog.tools(name) for name in names), return_exceptions=True)
        tools = {n: {t.name: t for t in ts} for n, ts in zip(names, listed, strict=True) if isinstance(ts, list)}
        results = []
        for index, call in enumerate(request.calls):
            backend = self.registry.get(call.server)
            known = tools.get(call.server)
            refusal = precheck(call.server, call.tool, call.arguments, backend, known, request.read_only, bounds)
            results.append(
                DryRunItem(
                    index=index,
                    id=call.id or str(index),
                    server=call.server,
                    tool=call.tool,
                    status=refusal.status if refusal else ItemStatus.pending,
                    error=ItemError.model_validate(refusal.error()) if refusal else None,
                )
            )
        return DryRun(valid=all(r.status is ItemStatus.pending for r in results), results=results)
