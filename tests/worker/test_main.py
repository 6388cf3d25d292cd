"""The worker process: pick-up woken by Redis or a job's end, not by arq's poll delay (nor, for a job skipped while a
shard of its batch runs here or queued while every slot was taken, by the idle poll); a stop that never waits for the
idle poll; the arq internals it relies on."""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from datetime import datetime

import arq
import httpx
import redis.asyncio as aioredis
from arq.worker import Worker as ArqWorker

from mcp_batch import shards
from mcp_batch.settings import Settings
from tests.conftest import REDIS_URL
from tests.support import (
    ServiceHandle,
    eventually,
    finished,
    running_api,
    running_service,
    stamps,
    stopped,
    submit,
)
from worker.context import STATE, WorkerState
from worker.main import create_worker


async def test_an_idle_worker_picks_up_new_work_at_once(service: ServiceHandle, client: httpx.AsyncClient) -> None:
    assert service.settings.worker_idle_poll_seconds == 30  # without the wake-up, pick-up would wait this long
    for _ in range(3):  # the first may meet the worker's first poll; the others need the wake-up
        batch_id = (await submit(client, [{"server": "demo_http", "tool": "echo"}]))["id"]
        document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 10})).json()
        assert document["status"] == "completed"


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


async def test_a_job_queued_behind_a_full_worker_starts_as_soon_as_a_slot_frees(settings: Settings) -> None:
    full = settings.model_copy(update={"worker_max_jobs": 1})
    assert full.worker_idle_poll_seconds == 30  # without a wake at the job's end, the second would wait this long
    async with running_service(full) as service, httpx.AsyncClient(base_url=service.base_url, timeout=30) as client:
        first = (await submit(client, stamps("demo_http", 1, seconds=1.0)))["id"]

        async def first_runs() -> bool:
            return (await client.get(f"/v1/batches/{first}")).json()["status"] == "running"

        await eventually(first_runs, what="the first batch to take the worker's one job slot", timeout=10)
        second = (await submit(client, stamps("demo_http", 1)))["id"]  # its wake comes while the slot is taken
        ended = await finished(client, first, timeout=10)
        started = await finished(client, second, timeout=10)
    assert _ts(started["started_at"]) - _ts(ended["finished_at"]) < 1.0


async def test_a_graceful_stop_while_a_job_ends_does_not_wait_for_the_idle_poll(settings: Settings) -> None:
    assert settings.worker_idle_poll_seconds == 30
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        worker = create_worker(settings, handle_signals=False)
        worker_task = asyncio.create_task(worker.async_run())
        try:
            batch_id = (await submit(client, stamps("demo_http", 1, seconds=1.0)))["id"]

            async def running() -> bool:
                return (await client.get(f"/v1/batches/{batch_id}")).json()["counts"]["running"] == 1

            await eventually(running, what="the batch's call to be in flight", timeout=20)
            worker.handle_sig(signal.SIGTERM)  # the graceful stop: the job ends, then the poll is cancelled
            await asyncio.wait([worker_task], timeout=10)
            assert worker_task.done(), "the worker was still stopping 10 s after its job ended"
        finally:
            await stopped(worker, worker_task)


async def test_a_job_skipped_while_its_batch_runs_here_starts_when_that_shard_ends(
    service: ServiceHandle, client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    worker = service.worker
    assert worker is not None and service.settings.worker_idle_poll_seconds == 30
    call = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 1.0}}
    batch_id = (await submit(client, [call]))["id"]

    def runs_here() -> bool:
        return any(shards.batch_of(job) == batch_id and not task.done() for job, task in worker.tasks.items())

    await eventually(runs_here, what="the batch's job running on the worker")
    state: WorkerState = worker.ctx[STATE]
    replacement = shards.job_id(batch_id, 0, 1)  # as a take-over queues it while the job it replaces still runs
    await state.store.queue.enqueue(batch_id, 0, replacement, 1)
    await state.store.queue.wake(batch_id)  # the poll it wakes skips the job: a shard of its batch runs here
    document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 10})).json()
    assert document["status"] == "completed"

    async def started() -> bool:  # arq takes a job off its queue once it has run
        return await redis.zscore(state.keys.queue, replacement) is None

    await eventually(started, what="the skipped job started (not at the 30 s idle poll)", timeout=10)


async def test_a_job_queued_while_every_slot_is_taken_starts_when_one_frees(
    settings: Settings,
) -> None:
    one_slot = settings.model_copy(update={"worker_max_jobs": 1})
    assert one_slot.worker_idle_poll_seconds == 30
    long = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 1.0}}
    short = {"server": "demo_http", "tool": "echo", "arguments": {"message": "next"}}
    async with running_service(one_slot) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        first = (await submit(client, [long]))["id"]
        second = (await submit(client, [short]))["id"]  # its wake finds the one slot taken
        await finished(client, first, timeout=10)
        started = time.monotonic()
        document = await finished(client, second, timeout=10)
    assert document["status"] == "completed"
    assert time.monotonic() - started < 5, "the queued job waited for the 30 s idle poll"


async def test_the_arq_internals_the_worker_overrides_keep_their_shape() -> None:
    """worker/main.py overrides these arq methods and reads these attributes: a new arq must be checked by hand."""
    assert arq.VERSION.startswith("0.28."), f"arq {arq.VERSION}: check worker/main.py's overrides, then the pin"
    overridden = {
        "_poll_iteration": ["self"],
        "start_jobs": ["self", "job_ids"],
        "handle_sig": ["self", "signum"],
        "close": ["self"],
    }
    for name, parameters in overridden.items():
        assert list(inspect.signature(getattr(ArqWorker, name)).parameters) == parameters, name
    assert inspect.iscoroutinefunction(ArqWorker._poll_iteration) and inspect.iscoroutinefunction(ArqWorker.close)
    worker = create_worker(Settings(redis_url=REDIS_URL, auth="none"), handle_signals=False)
    attributes = ("tasks", "allow_pick_jobs", "main_task", "burst", "ctx", "sem", "job_counter", "max_jobs", "loop")
    for attribute in (*attributes, "in_progress_timeout_s", "queue_name", "run_job"):
        assert hasattr(worker, attribute), attribute
    # start_jobs is arq's with one script for its pick (store/queue.py's JobPick): what it mirrors is still there
    arqs = inspect.getsource(ArqWorker.start_jobs)
    for kept in ("await self.sem.acquire()", "self.job_counter >= self.max_jobs", "int(self.in_progress_timeout_s"):
        assert kept in arqs, kept
    for kept in ("score > timestamp_ms()", "self.run_job(job_id, int(score))", "_release_sem_dec_counter_on_complete"):
        assert kept in arqs, kept
