"""The arq job: take a batch's items one by one through the store, call the backend, store each result.

A shard job holds a lease while it runs (renewed every third of its length); a worker killed mid-batch stops
renewing, and any worker's recovery loop hands the job's in-flight items to a replacement (see recovery.py). Calls
in flight are cut short by a cancel (after its grace period), by the batch's deadline, or by a graceful shutdown
(after its grace period; those items are handed back, not recorded).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from mcp_batch import records, shards
from mcp_batch.contract import budget
from mcp_batch.models import BatchStatus, ItemStatus, Mode
from mcp_batch.ops import logs, tracing
from mcp_batch.records import ItemRecord, error_info
from mcp_batch.store import Store
from mcp_batch.store.batch_row import BatchMeta
from mcp_batch.store.claims import Claim
from mcp_batch.store.outage import backoff, with_redis_retry
from worker import metrics, priority
from worker.calls import run_call
from worker.context import WorkerState
from worker.context import state as worker_state
from worker.feeder import Feeder, reads_ahead
from worker.item_refs import BatchReferences
from worker.progress import ProgressRelay
from worker.questions import BatchQuestions, bind, for_batch
from worker.recovery import requeue
from worker.sessions import SessionPool
from worker.stored_pages import CursorPages

logger = logging.getLogger(__name__)

_RENEW_RETRY_CAP = 0.5  # seconds: the longest wait between two tries of a lease renewal that failed


class _NotSent(Exception):
    """A call about to be sent when its shard was cut: it is cut, not sent."""


@dataclass
class _Lane:
    """What one lane is doing, so a cut can reach its call."""

    claim: Claim | None = None
    dispatched: bool = False  # the call may have reached its backend
    writes: bool = False  # and it may write (a tool neither read-only nor idempotent)
    timeout: asyncio.Timeout | None = None


@dataclass
class _Shard:
    """One shard job on this worker: why it stops early, if it does, and its lanes."""

    meta: BatchMeta
    reason: str | None = None  # why calls are cut: 'cancel' or 'shutdown'
    grace: float = 0.0  # how long calls in flight may still run once cut
    lost: bool = False  # the lease was taken over: claim nothing more
    lanes: list[_Lane] = field(default_factory=list)
    questions: BatchQuestions | None = None  # what a backend's question during a call does
    handed_back: list[tuple[int, bool]] = field(default_factory=list)  # (index, may have run) of calls cut
    # The claims whose records this job stored that must not run twice: writes it sent (flag 2), claims recovered
    # (their flag). Should a failover lose a record, the item is still claimed under the job at its release.
    ran: dict[int, int] = field(default_factory=dict)

    @property
    def stopping(self) -> bool:
        return self.reason is not None or self.lost

    def when(self, lane: _Lane) -> float | None:
        """The loop time at which this lane's call is cut, or None."""
        loop = asyncio.get_running_loop()
        candidates = []
        if self.meta.deadline_at is not None:
            candidates.append(loop.time() + self.meta.deadline_at - time.time())
        if self.reason is not None:
            candidates.append(loop.time() + (self.grace if lane.dispatched else 0.0))
        return min(candidates, default=None)

    def cut(self, reason: str, grace: float) -> None:
        """Claim nothing more; cut calls not yet sent at once and calls in flight after `grace`."""
        if self.reason is None:
            self.reason, self.grace = reason, grace
        for lane in self.lanes:
            if lane.claim is not None and lane.timeout is not None:
                when = self.when(lane)
                current = lane.timeout.when()
                lane.timeout.reschedule(when if current is None or when is None else min(current, when))

    def cut_record(self, lane: _Lane, build: records.Builder) -> ItemRecord | None:
        """The record of a call cut short; None when it is handed back to another worker instead."""
        if self.meta.deadline_at is not None and time.time() >= self.meta.deadline_at:
            status, code, what = ItemStatus.expired, "deadline_exceeded", "the batch's deadline passed"
        elif self.reason == "cancel":
            status, code, what = ItemStatus.cancelled, "cancelled", "the batch was cancelled"
        else:  # a recovered claim may have run under the worker that first had it, sent here or not
            may_have_run = lane.dispatched or (lane.claim is not None and lane.claim.recovered)
            self.handed_back.append((lane.claim.index if lane.claim else -1, may_have_run))
            return None
        phase = "while the call was in flight" if lane.dispatched else "before the call was sent"
        recovered = lane.claim is not None and lane.claim.recovered
        if recovered and not lane.dispatched:  # not sent here, but maybe by the worker that stopped holding it
            phase = "before the call was sent again (the worker first running it stopped mid-call: it may have run)"
        return build(status, error=error_info(code, f"{what} {phase}", "batch"), recovered=recovered)


async def run_batch(ctx: dict[str, Any], batch_id: str, shard: int = 0, generation: int = 0) -> None:
    """Run one shard of a batch: its share of `max_concurrency` lanes (one in serial mode), each finishing and
    claiming items in one round trip, until nothing is left to claim. Shards on other workers claim from the same
    cursor, so they share the items however fast each goes."""
    with metrics.job_running():
        await _run_shard(ctx, batch_id, shard, generation)


async def _run_shard(ctx: dict[str, Any], batch_id: str, shard: int, generation: int) -> None:
    state = worker_state(ctx)
    store, settings = state.store, state.settings
    job = shards.job_id(batch_id, shard, generation)
    logs.bind(batch_id=batch_id, job=job)
    # One round trip: a job taken over before it started only leaves its runner noted (and its meta read for nothing).
    begun = await store.leases.start(batch_id, job, state.worker_id)
    if not begun.renewed:
        logger.info("job %s was taken over before it started; nothing to do", job)
        return
    meta = begun.meta
    if meta is None:
        logger.warning("batch %s is gone (expired or deleted) before it ran", batch_id)
        await store.leases.release(batch_id, job)
        return
    run = _Shard(meta, questions=for_batch(store.questions, batch_id, begun.questions, settings))
    # The jobs index takes this worker's lease (its length need not be the submitter's) beside the first claim, not
    # before it: the sweep finds a job whose worker dies as soon as its lease lapses.
    indexing = asyncio.create_task(store.leases.index([job]))
    renewing = asyncio.create_task(_renew(store, batch_id, job, settings.lease_seconds / 3, run))
    watching = asyncio.create_task(_watch(state, batch_id, run))
    limited = [s for s in meta.servers if (b := state.pool.registry.get(s)) is not None and b.rate_limit]
    holding = asyncio.create_task(
        priority.hold(state.pool.gate.turns, limited, meta.tenant, meta.priority, job, settings.lease_seconds / 3)
    )
    try:
        lanes = 1 if meta.mode is Mode.serial else shards.lanes(meta.max_concurrency, meta.shards, shard)
        run.lanes = [_Lane() for _ in range(lanes)]
        references = BatchReferences(store, batch_id)
        feeder = Feeder(store.claims, batch_id, job, lanes, reads_ahead(meta), references.stored)
        # The lanes are started inside the shard's span: they inherit it, so each item's span is its child.
        with tracing.shard_span(meta.traceparent, batch_id, job, shard, lanes):
            async with asyncio.TaskGroup() as lanes_group:  # one lane failing (Redis gone too long) stops the others
                for lane in run.lanes:
                    lanes_group.create_task(_lane(state, batch_id, run, lane, references, feeder))
        await feeder.close()  # the last records stored, claims held unrun given back
    finally:
        for task in (renewing, watching, holding):
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        (indexed,) = await asyncio.gather(indexing, return_exceptions=True)
        if isinstance(indexed, Exception):  # the next renewal indexes it; until then the sweep may look later
            logger.warning("job %s: the jobs index did not take its lease: %s", job, type(indexed).__name__)
    if run.reason == "shutdown":
        await _hand_back(state, batch_id, shard, generation, run)
    else:
        # A job ending as Redis goes away waits for it (up to the outage setting) rather than fail: its lease would
        # lapse and the sweep would do the same release later, with an error logged for nothing.
        released = await with_redis_retry(
            lambda: store.leases.release(batch_id, job, run.ran, ended=feeder.ended),
            outage=settings.redis_outage_seconds,
        )
        if released == "replaced":
            logger.warning(
                "job %s held claims without records (lost replies or lost records); queued a job for them", job
            )
            await requeue(state, batch_id, shard, generation + 1)
    logger.info("batch %s: job %s has no more items to run", batch_id, job)


async def _lane(
    state: WorkerState, batch_id: str, run: _Shard, lane: _Lane, references: BatchReferences, feeder: Feeder
) -> None:
    pool, worker_id, max_bytes = state.pool, state.worker_id, state.settings.max_result_bytes
    created_at, progress_rate = run.meta.created_at, state.settings.progress_writes_per_second
    while True:
        claim = await feeder.next(stopping=run.stopping)
        if claim is None:
            return
        lane.claim, lane.dispatched = claim, False
        logs.bind(item_id=claim.id, index=claim.index, server=claim.server)
        bind(run.questions, claim.index)
        build = records.builder(worker_id, round(time.time() - created_at, 6))

        def dispatched(writes: bool, lane: _Lane = lane) -> None:
            if run.reason is not None:  # cut between its timer and here: it must not be sent now
                raise _NotSent
            lane.dispatched, lane.writes = True, writes

        relay = ProgressRelay(state.store.progress, batch_id, claim.index, claim.id, progress_rate)
        try:
            async with asyncio.timeout_at(run.when(lane)) as timeout:
                lane.timeout = timeout
                with tracing.item_span(batch_id, claim) as span:  # current while the SDK sends the call
                    record = await _run_item(pool, references, claim, build, run.meta, dispatched, state.pages, relay)
                    tracing.item_finished(span, record)
        except (TimeoutError, _NotSent) as exc:
            if isinstance(exc, TimeoutError) and not timeout.expired():
                raise
            cut = run.cut_record(lane, build)
            if cut is None:
                return  # handed back: recorded by whoever runs it next
            record = cut
        finally:
            lane.timeout = None
            await relay.close()
        record = budget.cap_stored(record, max_bytes)  # every record passes here
        metrics.item_finished(claim.server, record["status"])
        if state.latency is not None:
            state.latency.note(claim.server, claim.tool, run.meta.tenant, record)
        references.finished(claim.index, record)
        if lane.dispatched and lane.writes:
            run.ran[claim.index] = 2
        elif claim.recovered:
            run.ran[claim.index] = claim.flag
        feeder.finish(claim, record)
        lane.claim = None


async def _run_item(
    pool: SessionPool,
    references: BatchReferences,
    claim: Claim,
    build: records.Builder,
    meta: BatchMeta,
    dispatched: Callable[[bool], None],
    pages: CursorPages,
    progress: ProgressRelay,
) -> ItemRecord:
    share = None if meta.rate_share is None else (meta.tenant, meta.rate_share)
    try:
        if claim.cursor is not None:  # a page of an earlier item: the backend is not called
            return await pages.answer(claim, meta.tenant, build)
        prepared = await references.prepare(claim)
        if isinstance(prepared, Claim):
            rank = (meta.tenant, meta.priority)
            return await run_call(
                pool,
                prepared,
                build,
                meta.read_only,
                dispatched,
                share,
                references.batch_id,
                rank,
                progress,
                meta.tenant,
            )
        return build(prepared.status, error=prepared.error, attempts=0)  # nothing ran
    except _NotSent:
        raise
    except Exception as exc:  # a bug must not leave the item running forever; its message may quote an argument
        logger.error("item %d failed inside the worker: %s", claim.index, logs.stack_only(exc))
        return build(ItemStatus.error, error=error_info("internal_error", "the worker failed", "internal"))


async def _renew(store: Store, batch_id: str, job: str, every: float, run: _Shard) -> None:
    """Renew the lease every `every` seconds; after a failed renewal (Redis unreachable, a cluster failover under
    way), try again within _RENEW_RETRY_CAP rather than a whole period later: the lease has been running down all
    through the outage, and other workers' sweeps take it over the moment it lapses."""
    wait, retries = every, None
    while True:
        await asyncio.sleep(wait)  # a periodic duty: the lease must be renewed well before it lapses
        try:
            renewed = await store.leases.renew(batch_id, job)
        except (RedisError, RedisClusterException, OSError) as exc:
            if retries is None:
                logger.warning("could not renew the lease of job %s: %s; retrying", job, type(exc).__name__)
                retries = backoff(cap=min(every, _RENEW_RETRY_CAP))
            wait = next(retries)
            continue
        if not renewed:
            logger.warning("job %s lost its lease (taken over); claiming nothing more", job)
            run.lost = True
            return
        if retries is not None:
            logger.info("renewed the lease of job %s again", job)
        wait, retries = every, None


async def _watch(state: WorkerState, batch_id: str, run: _Shard) -> None:
    """Cut the shard short on a cancel of its batch or a graceful shutdown of this worker."""
    settings, draining = state.settings, state.draining
    with state.cancels.watch(batch_id) as cancelled:
        while True:
            if draining.is_set():
                run.cut("shutdown", settings.shutdown_grace_seconds)
                return
            if cancelled.is_set():
                cancelled.clear()
                # A resubscribed listener wakes every watcher: check the batch really was cancelled.
                if await state.store.reads.status(batch_id) in (BatchStatus.cancelling, BatchStatus.cancelled):
                    run.cut("cancel", settings.cancel_grace_seconds)
                    return
            waits = [asyncio.ensure_future(e.wait()) for e in (draining, cancelled)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()


async def _hand_back(state: WorkerState, batch_id: str, shard: int, generation: int, run: _Shard) -> None:
    """A graceful stop: give this job's part to a replacement at once instead of letting its lease lapse."""
    store = state.store
    job, new_job = shards.job_id(batch_id, shard, generation), shards.job_id(batch_id, shard, generation + 1)
    clean = [index for index, may_have_run in run.handed_back if not may_have_run]
    outcome = await store.leases.take_over(batch_id, job, new_job, force=True, never_dispatched=clean)
    if outcome == "replaced":
        await requeue(state, batch_id, shard, generation + 1)
    logger.info("job %s handed back (%s, %d calls cut)", job, outcome, len(run.handed_back))
