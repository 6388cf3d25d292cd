"""Use cases that make a batch: submit (once per Idempotency-Key), retry a finished one, and the dry run.

Every door submits through `submit`, so a batch is validated, stored and queued the same way whichever door it came
in by; nothing is half-written: a batch that could not be queued is removed, an Idempotency-Key released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp_batch import shards
from mcp_batch.backend_info import ToolInfo
from mcp_batch.contract.checks import Bounds, Refusal, precheck
from mcp_batch.contract.references import any_may_reference
from mcp_batch.contract.retry_settings import annotate
from mcp_batch.contract.validation import validate_batch
from mcp_batch.contract.webhook_policy import WebhookPolicy
from mcp_batch.dry_runs import DryRun, DryRunItem
from mcp_batch.errors import BackendUnauthenticated, Forbidden, InvalidBatch, InvalidCursor, Problem
from mcp_batch.models import BatchRequest, ItemError, ItemStatus
from mcp_batch.ops import tracing
from mcp_batch.records import error_info
from mcp_batch.retry_request import RetryRequest
from mcp_batch.store import idempotency, overview
from mcp_batch.store.batch_row import BatchRow
from mcp_batch.store.submits import Created
from mcp_batch.tenants import ANYONE, Caller, authorize
from service.application import credentials, estimating, questions
from service.application.retry import Lineage, retry_request
from service.application.services import Services
from service.application.tool_lists import tools_of


@dataclass(frozen=True)
class Submitted:
    """A submit's outcome: the batch, and whether this request made it (False: an Idempotency-Key replay); `row`,
    the batch as this request stored it (None for a replay)."""

    batch_id: str
    created: bool
    row: BatchRow | None = None


def validate(services: Services, request: BatchRequest, caller: Caller = ANYONE) -> int:
    """Whole-batch checks (InvalidBatch lists every fault, Forbidden what the caller's key may not do); the
    batch's effective max_concurrency."""
    settings = services.settings
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
        max_argument_bytes=settings.max_argument_bytes,
    )


async def _store_and_queue(
    services: Services,
    request: BatchRequest,
    caller: Caller,
    concurrency: int,
    lineage: Lineage | None = None,
    idempotency_key: str | None = None,
) -> Created:
    """Store a validated batch (of this max_concurrency) atomically under the caller's tenant, queue the shard jobs,
    wake the workers.

    Past `max_unfinished_items` (the service's, or the caller's key's for its tenant) or the tenant's stored bytes
    nothing is stored and Backpressure (a 429) is raised: the store checks them in the step that stores the batch."""
    settings, store = services.settings, services.store
    servers, linked = await _off_loop_if_large(len(request.calls), _survey, request)
    limits = services.registry.limits(servers)
    shape = (len(request.calls), concurrency, request.mode, linked)
    count = shards.ceiling(*shape, settings.max_shards, settings.shard_min_items)
    if count > 1:  # a small batch is one shard whatever the workers: no round trip to count them
        live = await overview.live_workers(services.redis, services.keys, settings.ready_worker_seconds)
        count = shards.plan(*shape, live, settings.max_shards, settings.shard_min_items)
    batch_id = store.submits.new_id()
    jobs = [shards.job_id(batch_id, shard) for shard in range(count)]
    queueing = store.queue.step_to_wake(batch_id, jobs, caller.tenant)
    created = await store.submits.create(
        request,
        concurrency,
        limits,
        batch_id,
        jobs,
        retry_of=lineage.retry_of if lineage else None,
        settings_from=lineage.settings_from if lineage else None,
        idempotency_key=idempotency_key,
        tenant=caller.tenant,
        rate_share=caller.rate_share,
        traceparent=tracing.traceparent(),
        max_stored_bytes=caller.max_stored_bytes or settings.max_stored_bytes,
        retry_after=settings.backpressure_retry_after_seconds,
        max_unfinished_items=settings.max_unfinished_items,
        tenant_max_unfinished_items=caller.max_unfinished_items,
        queue=queueing,
    )
    if not created.queued:  # the control plane is another Redis: the jobs go in a round trip of their own
        try:
            await store.queue.send(queueing)
        except BaseException:
            await store.submits.delete(batch_id, jobs)
            raise
    services.metrics.batch_submitted()
    return created


async def submit(
    services: Services,
    request: BatchRequest,
    caller: Caller = ANYONE,
    key: str | None = None,
    lineage: Lineage | None = None,
) -> Submitted:
    """Submit, unless the Idempotency-Key `key` already made a batch for the same request.

    Validate, claim the key, store and queue, then record the batch under the key; the key is released if the
    batch could not be stored. The same key with another request: IdempotencyConflict.
    """
    request = questions.defaulted(request)
    with tracing.submit_span(len(request.calls)) as span:
        submitted = await _submit(services, request, caller, key, lineage)
        tracing.submitted(span, submitted.batch_id, submitted.created)
        return submitted


async def _submit(
    services: Services, request: BatchRequest, caller: Caller, key: str | None, lineage: Lineage | None
) -> Submitted:
    concurrency = await _off_loop_if_large(len(request.calls), validate, services, request, caller)
    if key is None:
        created = await _store_and_queue(services, request, caller, concurrency, lineage)
        return Submitted(created.batch_id, True, created.row)
    body = request.model_dump(mode="json") if lineage is None else lineage.fingerprint()
    keys = services.store.idempotency
    held = await keys.claim(key, idempotency.fingerprint(body), caller.tenant)
    if held.batch_id is not None:
        return Submitted(held.batch_id, False)
    try:
        created = await _store_and_queue(services, request, caller, concurrency, lineage, idempotency_key=held.name)
    except BaseException:
        await keys.release(held)
        raise
    await keys.complete(held, created.batch_id)
    return Submitted(created.batch_id, True, created.row)


async def retry(
    services: Services, batch_id: str, caller: Caller = ANYONE, key: str | None = None, body: RetryRequest | None = None
) -> Submitted:
    """A new batch of the finished batch's items that did not succeed, linked by `retry_of`, with the batch's
    settings but those `body` sets; checked as a submit is (a fault of a kept setting names the batch it came from)."""
    planned = await retry_request(services.store, batch_id, body)
    inherited = planned.lineage.settings_from
    try:
        return await submit(services, planned.request, caller, key, planned.lineage)
    except InvalidBatch as exc:
        if isinstance(exc, InvalidCursor):
            raise
        raise InvalidBatch(_kept_from(exc.problems, inherited)) from None
    except Forbidden as exc:
        raise Forbidden(_kept_from(exc.problems, inherited)) from None


def _kept_from(problems: list[Problem], inherited: dict[str, str]) -> list[Problem]:
    return [Problem(p.loc, annotate(p.loc, p.msg, inherited), p.type) for p in problems]


async def dry_run(services: Services, request: BatchRequest, caller: Caller = ANYONE) -> DryRun:
    """Every check a batch would meet, with each call's would-be status, and how long it would take (its
    estimate); nothing is stored or queued. A large batch is checked in a worker thread, as a large submit is, so
    the event loop keeps serving other requests meanwhile."""
    calls = len(request.calls)
    concurrency = await _off_loop_if_large(calls, validate, services, request, caller)
    names = await _off_loop_if_large(calls, _known_servers, services, request)
    listed = await asyncio.gather(*(tools_of(services, name, caller.tenant) for name in names), return_exceptions=True)
    tools = {n: {t.name: t for t in ts} for n, ts in zip(names, listed, strict=True) if isinstance(ts, list)}
    results = await _off_loop_if_large(calls, _would_be, services, request, caller, tools)
    connect = await credentials.connections_needed(services, caller, names)
    routes = {needed.server: needed.connect for needed in connect}
    for result in results:
        if result.status is ItemStatus.pending and result.server in routes:
            route = routes[result.server]
            message = f"no usable credential of the tenant's for {result.server!r} (set it with {route})"
            error = error_info(BackendUnauthenticated.code, message, "backend", connect=route)
            result.status, result.error = ItemStatus.unauthenticated, ItemError.model_validate(error)
    sent = await _off_loop_if_large(calls, estimating.dispatched, results)
    return DryRun(
        valid=sum(sent.values()) == calls,
        results=results,
        connect=connect,
        estimate=await estimating.estimate(services, request, sent, concurrency, caller),
    )


def _would_be(
    services: Services, request: BatchRequest, caller: Caller, tools: dict[str, dict[str, ToolInfo]]
) -> list[DryRunItem]:
    """Each call's would-be status: what the worker's own checks would refuse it for, or pending."""
    bounds = Bounds(services.settings.max_argument_bytes, services.settings.max_argument_depth)
    results = []
    for index, call in enumerate(request.calls):
        backend = services.registry.get(call.server)
        known = tools.get(call.server)
        if call.cursor is not None:  # a page read from the store: only its cursor is checked
            refusal = _cursor_refusal(services, call.cursor, caller)
        else:
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
    return results


def _cursor_refusal(services: Services, cursor: str, caller: Caller) -> Refusal | None:
    """Why a call's cursor will not verify (what it names is checked when it runs), or None."""
    try:
        services.cursors.open(cursor, caller.tenant)
    except InvalidCursor as exc:
        return Refusal(ItemStatus.invalid_cursor, "invalid_cursor", exc.reason)
    return None


T = TypeVar("T")
_OFF_LOOP_CALLS = 1_000  # a batch with more calls is checked in a worker thread: the event loop serves others


async def _off_loop_if_large(calls: int, check: Callable[..., T], *args: Any) -> T:
    """`check(*args)`, in a worker thread for a large batch (pure Python there gives the GIL away every few ms)."""
    return await asyncio.to_thread(check, *args) if calls > _OFF_LOOP_CALLS else check(*args)


def _known_servers(services: Services, request: BatchRequest) -> set[str]:
    return {call.server for call in request.calls if call.server in services.registry}


def _survey(request: BatchRequest) -> tuple[set[str], bool]:
    """The servers the batch calls, and whether any call may reference another's result."""
    return {call.server for call in request.calls}, any_may_reference([call.arguments for call in request.calls])
