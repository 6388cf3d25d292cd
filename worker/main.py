"""The arq worker: its settings class, start-up and shut-down, and a queue poll that Redis wakes at once."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import socket
from contextlib import ExitStack, suppress
from functools import cache, partial
from typing import Any

from arq import func
from arq.worker import Worker as ArqWorker
from redis.exceptions import RedisError

from mcp_batch import shards
from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.limits import LeaseSemaphore, LocalLeaseSemaphore, LocalRateLimiter, RateLimiter
from mcp_batch.backends.priority import Priorities
from mcp_batch.backends.servers_file import load_servers, require_secrets_key
from mcp_batch.contract.checks import Bounds
from mcp_batch.contract.item_cursors import CursorKey
from mcp_batch.credentials import flow_state
from mcp_batch.ops import collector, durability, logs, tracing
from mcp_batch.ops.async_library import declared_asyncio
from mcp_batch.ops.payload_logs import keep_payloads_out_of_logs
from mcp_batch.ops.replication import WriteGuard
from mcp_batch.ops.slot_wait import SlotWait
from mcp_batch.settings import Settings, get_settings
from mcp_batch.store import Store
from mcp_batch.store.channels import Listener
from mcp_batch.store.connection import check_control, close_data, control_pool, control_settings, data_client
from mcp_batch.store.cursor_secret import cursor_secret
from mcp_batch.store.outage import redis_retried
from mcp_batch.store.queue import JOB_FUNCTION, Heartbeat, JobPick, queue_name, wake_channel
from mcp_batch.store.sentinel import close_sentinels
from worker import metrics
from worker.admission import Gate
from worker.connect_wait import ConnectWait
from worker.context import STATE, WorkerState
from worker.credentials import EXPIRY_MARGIN_SECONDS, TenantCredentials
from worker.delivery import deliver_forever
from worker.fair_pick import FairPick, tenant_job_slots
from worker.latency import LatencySampler
from worker.machine_tokens import ClientCredentialTokens
from worker.priority import PriorityTurns
from worker.recovery import recover_forever
from worker.sessions import SessionPool
from worker.stored_pages import CursorPages
from worker.tasks import run_batch
from worker.tenant_sessions import TenantSessions
from worker.token_refresh import LockedRefresher

logger = logging.getLogger(__name__)

_HAND_BACK_SECONDS = 5.0  # after the grace period, time for cut shards to hand their part back
_BEAT_SECONDS = 1.0  # how often a worker says it is alive, busy or idle


async def startup(ctx: dict[str, Any]) -> None:
    """Load the servers file (a bad one stops the worker) and keep the long-lived clients in ctx (`WorkerState`)."""
    settings: Settings = ctx.get("settings") or get_settings()
    keep_payloads_out_of_logs()
    tracing.configure("mcp-batch-worker")  # only when the OTEL_* variables ask for traces
    registry = load_servers(settings.servers)
    keys = settings.key_names
    redis = ctx["redis"]
    await check_control(redis)
    data = await data_client(settings, redis)
    catalog = Catalog(data, keys, registry, settings.tools_refresh_seconds, settings.connect_timeout_seconds)
    released, cancels, done, credential_changes = (
        Listener(redis, c)
        for c in (keys.released_channel, keys.cancel_channel, keys.done_channel, keys.credentials_channel)
    )
    for listener in (released, cancels, done, credential_changes):
        await listener.start()
    if settings.limiter == "redis":
        limiter, semaphore = RateLimiter(data, keys), LeaseSemaphore(data, keys, control=redis)
        gate = Gate(limiter, semaphore, released, settings.redis_outage_seconds)
        gate.turns = PriorityTurns(Priorities(data, keys), settings.redis_outage_seconds)  # priority lives in Redis
    else:
        gate = Gate(LocalRateLimiter(), LocalLeaseSemaphore(), released, settings.redis_outage_seconds)
    store = Store.from_settings(data, settings, control=redis)
    require_secrets_key(registry, store.credentials.configured)
    oauth_margin = EXPIRY_MARGIN_SECONDS
    sealer = store.credentials.sealer if store.credentials.configured else None
    tenant_sessions = TenantSessions(settings.max_tenant_sessions, settings.tenant_session_idle_seconds)
    pool = SessionPool(
        registry,
        catalog,
        gate,
        settings.connect_timeout_seconds,
        settings.default_timeout_seconds,
        settings.limit_max_wait_seconds,
        settings.max_attempts,
        Bounds(settings.max_argument_bytes, settings.max_argument_depth),
        settings.retry_base_seconds,
        settings.retry_max_seconds,
        TenantCredentials(
            store.credentials,
            refresher=LockedRefresher(store.credentials, store.oauth, oauth_margin, settings.connect_timeout_seconds),
            machine=ClientCredentialTokens(store.oauth, sealer, oauth_margin, settings.connect_timeout_seconds),
            margin=oauth_margin,
        ),
        tenant_sessions,
    )
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    # Bound in this (the worker's main) task's context, so every job, lane and loop started from here inherits them.
    logs.bind(worker=worker_id)
    persistence = await durability.read(data, settings)  # where the claims are written
    durability.log_at_start(persistence, "worker")
    guard = WriteGuard(persistence.waits_for_disk, settings.replica_wait_count, settings.replica_wait_seconds)
    if guard.disk or guard.waits_for_replicas:  # a write is sent only once its claim is on replicas and disk
        pool.write_wait = SlotWait(guard, data, keys)
    worker_metrics = metrics.start(registry.names, settings.worker_metrics_port, settings.worker_metrics_host)
    secret = await cursor_secret(redis, keys, settings.cursor_secret)
    cursors = CursorKey(secret)
    if settings.public_url is not None and store.credentials.configured:  # a batch that asks may connect first
        pool.connect_wait = ConnectWait(store.credentials, settings.public_url, flow_state.state_key(secret))
    pages = CursorPages(store, cursors, settings.response_max_bytes)
    state = WorkerState(settings, keys, redis, store, pool, worker_id, released, cancels, done, worker_metrics, pages)
    state.data = data
    state.credential_changes = credential_changes
    state.latency = LatencySampler(store.latencies)
    heartbeat = store.queue.heartbeat(worker_id)
    await heartbeat.beat()  # live (and counted by /readyz) before the first job
    state.loops = [
        asyncio.create_task(_beat_forever(heartbeat), name="heartbeat"),
        asyncio.create_task(recover_forever(state), name="recovery"),
        asyncio.create_task(deliver_forever(state), name="webhooks"),
        asyncio.create_task(tenant_sessions.run_idle_closer(), name="idle-tenant-sessions"),
        asyncio.create_task(tenant_sessions.run_rechecks(credential_changes), name="credential-changes"),
    ]
    if settings.warm_sessions:  # in the background: start-up never waits for a backend
        state.loops.append(asyncio.create_task(pool.warm(), name="warm-sessions"))
    ctx[STATE] = state
    state.undone.enter_context(declared_asyncio())
    collector.freeze_what_startup_made()  # the collector need not walk start-up's objects after every item
    logger.info("worker %s ready for %d backends", worker_id, len(registry))


async def _beat_forever(heartbeat: Heartbeat) -> None:
    """Beat every second however long the queue poll waits: /readyz and sharding count workers that beat lately."""
    while True:
        await asyncio.sleep(_BEAT_SECONDS)  # a periodic duty: there is no event for "still alive"
        with suppress(RedisError, OSError):  # the poll and the store report an outage; the next beat resumes
            await heartbeat.beat()


async def shutdown(ctx: dict[str, Any]) -> None:
    found: WorkerState | None = ctx.get(STATE)
    if found is None:
        return
    for loop in found.loops:
        loop.cancel()
        with suppress(asyncio.CancelledError):
            await loop
    try:
        # Best effort: a worker stopping in a Redis outage still closes its sessions (their processes) below, and
        # its heartbeat ages out of the set by itself.
        with suppress(RedisError, OSError):
            await found.store.queue.forget(found.worker_id)
            if found.latency is not None:
                await found.latency.close()
    finally:
        await found.metrics.close()
        await found.pool.close()
        for listener in (found.released, found.cancels, found.done, found.credential_changes):
            if listener is not None:
                await listener.stop()
        if isinstance(found.pool.write_wait, SlotWait):
            await found.pool.write_wait.close()
        if found.data is not None:
            await close_data(found.data, found.redis)
        tracing.flush()
        found.undone.close()


class Worker(ArqWorker):
    """arq's worker, except that an idle worker waits on the wake channel instead of sleeping `poll_delay`.

    arq polls its queue every poll_delay (0.5 s by default), which would add up to half a second to every
    batch. Here the API publishes on the wake channel after each enqueue; the poll runs at once, and the idle
    poll interval is only the fallback for a missed message.
    """

    def __init__(self, *args: Any, wake_channel: str, idle_poll_seconds: float, **kwargs: Any) -> None:
        super().__init__(*args, poll_delay=0, **kwargs)
        self._wake_channel = wake_channel
        self._idle_poll = idle_poll_seconds
        self._listener: Listener | None = None
        self._watch = ExitStack()
        self._draining: asyncio.Future[None] | None = None
        self._stopped_by: signal.Signals | None = None  # the signal that began a graceful stop
        self._pick: JobPick | None = None
        self._fair: FairPick | None = None

    # arq internal (0.28): arq opens its pool in main() when given none; ours is opened as the API's is (a Sentinel
    # URL's failed attempts closed, sentinels included).
    async def main(self) -> None:
        if self._pool is None:
            self._pool = await control_pool(self.ctx.get("settings") or get_settings())
        await super().main()

    # arq internal (0.28): arq starts every job it picks, each after four round trips (WATCH, EXISTS, ZSCORE, MULTI);
    # shards of one batch belong on different workers, and a job's pick is one script here (store/queue.py's
    # JobPick: the same check and the same in-progress key). The rest is arq's start_jobs as it is: its job slots
    # (sem, job_counter), its run_job, its callback that frees the slot.
    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """Start jobs one by one in fair order (worker/fair_pick.py: tenants in turns, priority within a tenant, no
        tenant past its share of the slots), skipping shards of a batch this worker already runs: other workers take
        those, or this one does once its own shard has finished (each job's end polls the queue again at once)."""
        if self._pick is None:
            self._pick = JobPick(self.pool, self.queue_name)
        state: WorkerState | None = self.ctx.get(STATE)
        if state is None:
            return  # not started yet: the next poll picks
        if self._fair is None:
            self._fair = FairPick(state.store.backlog, tenant_job_slots(state.settings))
        # A running job stays in arq's queue until it ends: left in, it would take one of its tenant's turns twice
        # (held, and queued), and a tenant holding half its slots could start no more.
        running = {job for job, task in self.tasks.items() if not task.done()}
        for job in await self._fair.order([raw.decode() for raw in job_ids if raw.decode() not in running]):
            if any(shards.batch_of(j) == shards.batch_of(job) for j, t in self.tasks.items() if not t.done()):
                continue
            await self.sem.acquire()
            if self.job_counter >= self.max_jobs:
                self.sem.release()
                return
            self.job_counter += 1
            try:
                score = await self._pick.take(job, int(self.in_progress_timeout_s * 1000))
            except BaseException:
                self.job_counter -= 1
                self.sem.release()
                raise
            if score is None:  # running elsewhere, done, or queued again for later
                self.job_counter -= 1
                self.sem.release()
                continue
            task = self.loop.create_task(self.run_job(job, score))
            self._fair.started(job)
            task.add_done_callback(partial(self._fair_ended, job))
            task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
            task.add_done_callback(self._job_ended)
            self.tasks[job] = task

    def _fair_ended(self, job: str, _task: asyncio.Task[Any]) -> None:
        if self._fair is not None:
            self._fair.ended(job)

    def _job_ended(self, _task: asyncio.Task[Any]) -> None:
        # A job's end frees a slot and its batch: jobs skipped above, or left in the queue while every slot was
        # taken, may start now rather than at the next idle poll (not while stopping: it takes nothing new).
        if self._listener is not None and self.allow_pick_jobs:
            self._wake.set()

    # arq internal (0.28): its poll sleeps poll_delay and lets a Redis error end the worker. Here it waits on the
    # wake channel (or a job's end) instead, and waits a Redis outage out, however long; running jobs ride it out
    # in the store.
    @redis_retried(outage=math.inf, cap=5.0)
    async def _poll_iteration(self) -> None:
        if self._listener is None:
            self._listener = Listener(self.pool, self._wake_channel)
            self._wake = self._watch.enter_context(self._listener.watch())
            await self._listener.start()
        elif not self.burst:
            # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancel that comes as the wake is set (a
            # job's end at the worker's stop), and the stop would wait out a whole idle poll.
            with suppress(TimeoutError):
                async with asyncio.timeout(self._idle_poll):
                    await self._wake.wait()
        self._wake.clear()
        await super()._poll_iteration()

    # arq internal (0.28): arq's signal handler cancels running jobs at once; a stop here is graceful.
    def handle_sig(self, signum: int) -> None:
        """SIGTERM or SIGINT: a graceful stop. A second SIGINT stops at once (Ctrl-C twice); a second SIGTERM
        does not: `uv run` passes on a SIGTERM sent to its whole process group (`kill -TERM -<pgid>`, systemd's
        control-group kill, `docker stop` of a wrapped command), so one stop often arrives twice. Anything else:
        arq's own stop."""
        if signum == signal.SIGUSR1 and self._stopped_by is not None:
            super().handle_sig(self._stopped_by)  # arq's close() of a worker run in a program: the program's signal
        elif signum not in (signal.SIGTERM, signal.SIGINT):
            super().handle_sig(signal.Signals(signum))
        elif self._draining is None:
            self._stopped_by = signal.Signals(signum)
            self._draining = asyncio.ensure_future(self.drain())
        elif signum == signal.SIGINT:
            super().handle_sig(signal.Signals(signum))
        else:
            logger.info("SIGTERM again: already stopping gracefully (a second SIGINT stops at once)")

    async def drain(self) -> None:
        """Take nothing new; let running shards finish their calls in flight (up to the grace period), hand the
        rest of their batches back at once, then stop."""
        logger.info("graceful stop: taking no new jobs, handing back running ones")
        self.allow_pick_jobs = False
        found: WorkerState | None = self.ctx.get(STATE)
        if found is not None:
            found.draining.set()
        grace = (found.settings if found else get_settings()).shutdown_grace_seconds
        jobs = [task for task in self.tasks.values() if not task.done()]
        if jobs:
            await asyncio.wait(jobs, timeout=grace + _HAND_BACK_SECONDS)
        if self.main_task is not None:
            self.main_task.cancel()

    # arq (0.28): close() cancels running jobs and re-raises their CancelledError; they are settled first here.
    async def close(self) -> None:
        self._watch.close()
        if self._listener is not None:
            await self._listener.stop()
        jobs = list(self.tasks.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        self.tasks.clear()
        pool = self._pool
        await super().close()
        if pool is not None:  # arq's pool on a Sentinel URL: arq closes its primary's connections only
            await close_sentinels(pool)


def arq_options(settings: Settings) -> dict[str, Any]:
    """What arq's Worker is given for these settings: the shard job, start-up and shut-down, the queue, Redis."""
    job = func(run_batch, name=JOB_FUNCTION, keep_result=0, max_tries=1, timeout=settings.job_timeout_seconds)
    return {
        "functions": [job],
        "on_startup": startup,
        "on_shutdown": shutdown,
        "queue_name": queue_name(settings.key_names),
        "redis_settings": control_settings(settings),
        "max_jobs": settings.worker_max_jobs,
        "ctx": {"settings": settings},
        "keep_result": 0,
    }


def create_worker(settings: Settings | None = None, **overrides: Any) -> Worker:
    """A worker for these settings; `overrides` go to arq's Worker (tests pass handle_signals=False, burst...)."""
    settings = settings or get_settings()
    options = arq_options(settings) | overrides
    return Worker(
        wake_channel=wake_channel(settings.key_names),
        idle_poll_seconds=settings.worker_idle_poll_seconds,
        **options,
    )


_WORKER_SETTINGS_DOC = """For `arq worker.main.WorkerSettings`: arq's plain settings class, made from the environment's
settings when arq asks for it (importing this module reads none); `mcp-batch worker` is the same worker with the
wake-up poll."""


@cache
def _worker_settings() -> type:
    return type("WorkerSettings", (), {"__doc__": _WORKER_SETTINGS_DOC, **arq_options(get_settings())})


def __getattr__(name: str) -> Any:
    if name == "WorkerSettings":  # looked up on the module by arq's command line
        return _worker_settings()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
