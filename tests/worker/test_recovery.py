"""Crash recovery with real worker processes: a worker killed with SIGKILL mid-batch, and one stopped with SIGTERM.

The backend counts the invocations of every item (`tally` is read-only, `tally_write` is a write), so each test
can say item by item what ran, what ran twice, and that no write ran twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.support import (
    HttpBackendProcess,
    all_results,
    call_backend,
    counted_servers,  # noqa: F401 - the `servers` fixture of this module
    eventually,
    finished,
    live_workers,
    running_api,
    running_worker,
    settings_env,
    submit,
    until_at_backend,
    worker_id,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]  # where `uv run` finds the project


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API alone: every worker of these tests is a real process the test can kill."""
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=90) as http:
        yield http


def tallies(n: int, seconds: float, prefix: str = "") -> list[dict[str, Any]]:
    """`n` calls alternating a read and a write, each with its own key (= its id)."""
    tools = ["tally", "tally_write"]
    return [
        {
            "id": f"{prefix}{i}",
            "server": "counted",
            "tool": tools[i % 2],
            "arguments": {"key": f"{prefix}{i}", "seconds": seconds},
        }
        for i in range(n)
    ]


async def finished_by(redis: aioredis.Redis, batch_id: str, worker: str) -> int:
    """How many of the batch's items this worker has finished."""
    records = await redis.hvals(Keys().results(batch_id))
    return sum(json.loads(r).get("worker") == worker for r in records)


async def until_finished_by(redis: aioredis.Redis, batch_id: str, worker: str, count: int) -> None:
    async def done() -> bool:
        return await finished_by(redis, batch_id, worker) >= count

    await eventually(done, what=f"{count} items finished by worker {worker}")


async def test_a_started_job_is_indexed_under_its_workers_lease_not_the_submitters(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis
) -> None:
    """The API queues a job its own lease ahead (30 s); the worker that starts it, with a 12 s lease, moves the
    sweep's index to that at once, not at its first renewal (4 s on): a crash before then is found 12 s on, not 30."""
    assert settings.lease_seconds >= 30
    batch_id = (await submit(api, [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 2}}]))["id"]
    job = shards.job_id(batch_id, 0)
    queued_until = await redis.zscore(Keys().jobs, job)
    assert queued_until is not None
    async with running_worker(settings.model_copy(update={"lease_seconds": 12.0})):

        async def running() -> bool:
            return (await api.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()["status"] == "running"

        await eventually(running, what="the job started")

        async def indexed_under_the_workers_lease() -> bool:
            score = await redis.zscore(Keys().jobs, job)
            return score is not None and score < time.time() * 1000 + 13_000 < queued_until

        await eventually(indexed_under_the_workers_lease, what="the index under the worker's lease", timeout=2.5)
        assert (await finished(api, batch_id))["status"] == "completed"


async def test_a_batch_survives_a_worker_killed_mid_batch_and_repeats_no_write(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"lease_seconds": 2.0, "sweep_seconds": 0.2})
    with worker_processes(settings, 2, tmp_path) as (victim, survivor):
        await live_workers(redis, 2)
        batch_id = (await submit(api, tallies(1000, 0.05), max_concurrency=24, read_only=False))["id"]
        await until_finished_by(redis, batch_id, worker_id(victim), 60)
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        document = await finished(api, batch_id, timeout=60)
    items = await all_results(api, batch_id)
    counts = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert document["status"] == "completed" and document["counts"]["total"] == 1000
    indexes = await redis.lrange(Keys().finished(batch_id), 0, -1)
    assert len(indexes) == 1000 and len(set(indexes)) == 1000  # every item finished exactly once
    recovered = [item for item in items if item["recovered"]]
    assert recovered, "the kill left nothing in flight"
    for item in items:
        ran = counts.get(item["id"], 0)
        if item["tool"] == "tally_write":
            assert ran <= 1, item  # a write is never repeated
            if item["recovered"]:
                assert item["status"] == "interrupted" and item["error"]["code"] == "interrupted"
            else:
                assert item["status"] == "ok" and ran == 1, item
        else:
            assert item["status"] == "ok", item
            assert ran in ((1, 2) if item["recovered"] else (1,)), item  # run again only if it was in flight
    assert all(item["worker"] != worker_id(victim) for item in recovered)
    assert worker_id(survivor) in {item["worker"] for item in recovered}
    print(f"completed {time.time() - killed_at:.1f}s after the kill; {len(recovered)} items recovered")


async def test_calls_at_the_backend_when_their_worker_was_killed_and_the_batch_cancelled_say_they_may_have_run(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"lease_seconds": 2.0, "sweep_seconds": 0.2})
    with worker_processes(settings, 1, tmp_path) as (victim,):
        batch_id = (await submit(api, tallies(4, 30), max_concurrency=4, read_only=False))["id"]

        async def at_the_backend() -> bool:
            return len((await call_backend(fresh_backend.url, "stats"))["tallies"]) == 4

        await eventually(at_the_backend, what="the 4 calls to reach the backend")
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)
    cancelled = await api.post(f"/v1/batches/{batch_id}/cancel")
    assert cancelled.json()["status"] == "cancelling"  # the killed worker's calls are still in flight for all it knows
    async with running_worker(settings):  # its sweep finds the lapsed lease; the take-over ends the batch
        document = await finished(api, batch_id, timeout=30)
    assert document["status"] == "cancelled" and document["counts"]["cancelled"] == 4
    for item in await all_results(api, batch_id):
        assert item["status"] == "cancelled" and item["worker"] == worker_id(victim), item
        assert item["error"]["code"] == "interrupted" and item["error"]["details"] == {"may_have_run": True}, item
        assert "may or may not have run" in item["error"]["message"]
    assert set((await call_backend(fresh_backend.url, "stats"))["tallies"].values()) == {1}  # each ran, once


async def test_a_taken_over_call_cut_by_a_cancel_before_it_was_sent_again_says_it_may_have_run(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    servers = {"slow": {"url": fresh_backend.url, "rate_limit": {"per_minute": 1, "burst": 1}}}
    (tmp_path / "slow.json").write_text(json.dumps({"mcpServers": servers}))
    update = {"servers": tmp_path / "slow.json", "lease_seconds": 2.0, "sweep_seconds": 0.2, "cancel_grace_seconds": 0}
    settings = settings.model_copy(update=update)
    calls = [{"id": "first", "server": "slow", "tool": "tally", "arguments": {"key": "first", "seconds": 30}}]
    with worker_processes(settings, 1, tmp_path) as (victim,):
        batch_id = (await submit(api, calls))["id"]

        async def at_the_backend() -> bool:
            return bool((await call_backend(fresh_backend.url, "stats"))["tallies"])

        await eventually(at_the_backend, what="the call to reach the backend")
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)
    # The survivor takes the read over (the victim's 2 s lease lapsed) under a lease of its own that a slow machine
    # cannot let lapse too; it sends the call again only once the backend's next slot comes, a minute on.
    async with running_worker(settings.model_copy(update={"lease_seconds": 30.0})):

        async def recovered() -> bool:  # the replacement job holds it now
            held = await redis.hvals(Keys().inflight(batch_id))
            return held == [shards.job_id(batch_id, 0, 1).encode()]

        await eventually(recovered, what="the survivor to claim the call again")
        cancel = await api.post(f"/v1/batches/{batch_id}/cancel")
        assert cancel.status_code == 200, cancel.text
        try:
            document = await finished(api, batch_id, timeout=30)
        except (TimeoutError, AssertionError):  # say where the call stood, and what the survivor's job held
            held = await redis.hgetall(Keys().inflight(batch_id))
            raise AssertionError(
                f"not ended: {(await api.get(f'/v1/batches/{batch_id}')).json()}; held {held}"
            ) from None
    item = document["results"][0]
    assert (item["status"], item["recovered"], item["error"]["code"]) == ("cancelled", True, "cancelled"), item
    assert "it may have run" in item["error"]["message"]


async def test_sigterm_lets_calls_in_flight_finish_and_hands_the_rest_back_at_once(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    # A lease far longer than the test: the rest can only move on because it was handed back.
    settings = settings.model_copy(update={"lease_seconds": 600.0, "shutdown_grace_seconds": 10.0})
    with worker_processes(settings, 2, tmp_path) as (victim, _):
        await live_workers(redis, 2)
        batch_id = (await submit(api, tallies(200, 0.1), max_concurrency=12, read_only=False))["id"]
        await until_finished_by(redis, batch_id, worker_id(victim), 10)
        victim.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(victim.wait, 15) == 0  # stopped by itself, cleanly, within the grace
        document = await finished(api, batch_id, timeout=60)
    items = await all_results(api, batch_id)
    counts = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    failed = [
        (item["id"], item["status"], item["error"], item["recovered"], item["worker"])
        for item in items
        if item["status"] != "ok" or item["recovered"]
    ]
    assert document["status"] == "completed" and not failed, failed
    assert all(counts[item["id"]] == 1 for item in items)  # nothing ran twice, nothing was cut


async def test_sigterm_cuts_calls_past_the_grace_and_only_reads_run_again(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"lease_seconds": 600.0, "shutdown_grace_seconds": 0.5})
    calls = [
        {"id": "read", "server": "counted", "tool": "tally", "arguments": {"key": "read", "seconds": 3}},
        {"id": "write", "server": "counted", "tool": "tally_write", "arguments": {"key": "write", "seconds": 3}},
    ]
    (tmp_path / "first").mkdir()
    with worker_processes(settings, 1, tmp_path / "first") as (victim,):
        batch_id = (await submit(api, calls, read_only=False))["id"]
        await until_at_backend(fresh_backend, "tallies", 2)
        victim.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(victim.wait, 15) == 0
    (tmp_path / "second").mkdir()
    with worker_processes(settings, 1, tmp_path / "second"):
        document = await finished(api, batch_id, timeout=60)
    items = {item["id"]: item for item in await all_results(api, batch_id)}
    counts = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert document["status"] == "completed"
    assert items["read"]["status"] == "ok" and items["read"]["recovered"] and counts["read"] == 2
    assert items["write"]["status"] == "interrupted" and counts["write"] == 1
    assert "not run again" in items["write"]["error"]["message"]


@pytest.mark.serial  # its assertion is a duration
async def test_a_sigterm_to_the_process_group_of_uv_run_is_one_graceful_stop(
    api: httpx.AsyncClient, settings: Settings, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    """`kill -TERM -<pgid>`, `docker stop` of a wrapped command, systemd's control-group kill: `uv run` passes the
    signal on, so the worker gets it twice; the second must not turn the graceful stop into an immediate one."""
    if shutil.which("uv") is None:
        pytest.skip("needs uv, to start the worker as users do")
    settings = settings.model_copy(update={"lease_seconds": 600.0, "shutdown_grace_seconds": 10.0})
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *["uv", "run", "mcp-batch", "worker"],
            cwd=ROOT,
            env={**os.environ, **settings_env(settings)},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,  # a process group of its own: uv and the worker, as a service manager runs them
        )
    try:
        await eventually(lambda: "ready for" in log.read_text(), what="the worker's start-up line", timeout=60)
        batch_id = (await submit(api, tallies(24, 1.0), max_concurrency=16, read_only=False))["id"]
        await until_at_backend(fresh_backend, "tallies", 16)  # 8 reads and 8 writes
        os.killpg(proc.pid, signal.SIGTERM)
        signalled = time.monotonic()
        async with asyncio.timeout(20):
            code = await proc.wait()
        stopped_after = time.monotonic() - signalled
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert code == 0, log.read_text()[-2000:]
    async with running_worker(settings):  # the lease is 600 s: the rest moves on only because it was handed back
        document = await finished(api, batch_id, timeout=30)
    items = await all_results(api, batch_id)
    counts = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    failed = [(item["id"], item["status"], item["recovered"]) for item in items if item["status"] != "ok"]
    assert document["status"] == "completed" and not failed, failed
    assert all(counts[item["id"]] == 1 for item in items)  # the 16 in flight finished once; nothing ran again
    assert "shutdown on SIGTERM" not in log.read_text()  # arq's immediate stop never ran
    print(f"group SIGTERM: the worker exited {stopped_after:.2f}s later; 16 calls in flight finished, 8 handed back")
