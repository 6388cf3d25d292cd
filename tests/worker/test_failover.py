"""A finished record lost in a Sentinel failover: the item's claim reached the replica before its write was sent, but
the record the worker wrote after the call was acknowledged by the primary and never replicated, so the promoted
replica has the item still claimed. A read may run again; a write is never sent a second time.

Real processes on loopback (tests/sentinel_set.py), on Redis 7.0 and Valkey 8.1: the replica is cut off the primary's
stream once every claim is on it (a test decides when each `held_write` call answers), the records are written to
the primary alone, the primary is killed and the sentinels promote the replica. The counting backend says how often
each write was sent.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.redis_server import RedisServer
from tests.sentinel_set import SentinelSet, ended_through_the_failover, started_sentinels  # noqa: F401 - the `sentinels` fixture
from tests.support import (
    HttpBackendProcess,
    all_results,
    call_backend,
    counted_servers,  # noqa: F401 - the `servers` fixture of this module
    eventually,
    running_api,
    running_worker,
    submit,
    until_at_backend,
    worker_processes,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LOST, KEPT = ["a0", "a1", "a2"], "b"  # writes whose records the failover loses; one whose call spans it


def held_writes(keys: list[str]) -> list[dict[str, Any]]:
    return [{"id": key, "server": "counted", "tool": "held_write", "arguments": {"key": key}} for key in keys]


async def records_on(server: RedisServer, batch_id: str) -> int:
    """How many finished records of the batch this node holds."""
    client = aioredis.Redis.from_url(server.url)
    try:
        return int(await client.hlen(Keys().results(batch_id)))
    finally:
        await client.aclose()


async def lose_records(sentinels: SentinelSet, backend: HttpBackendProcess, batch_id: str) -> None:
    """With every write of the batch at the backend (each claim on the replica before its call was sent): cut the
    replica off, let the LOST writes answer, and return once the primary alone holds their records."""
    await until_at_backend(backend, "tallies", len(LOST) + 1)
    await sentinels.cut_replica()
    await call_backend(backend.url, "let_go", {"keys": LOST})

    async def written() -> bool:
        return await records_on(sentinels.primary, batch_id) == len(LOST)

    await eventually(written, what="the primary holding the records")
    assert await records_on(sentinels.replica, batch_id) == 0  # acknowledged by the primary alone


async def fail_over(sentinels: SentinelSet) -> None:
    """Kill the primary; return once every sentinel names the promoted replica (the LOST items still claimed there):
    a client started while one still names the old primary fails its first connect, and arq's pool, tried again,
    leaves the failed attempt's connections to the sentinels open."""
    await sentinels.primary.stop(signal.SIGKILL)

    async def promoted() -> bool:
        return await sentinels.primary_ports() == {sentinels.replica.port}

    await eventually(promoted, what="the replica promoted", timeout=30)


async def test_a_write_whose_record_a_failover_lost_is_not_sent_again_by_the_worker_that_ran_it(
    sentinels: SentinelSet, settings: Settings, fresh_backend: HttpBackendProcess
) -> None:
    settings = settings.model_copy(update={"redis_url": sentinels.url, "sweep_seconds": 0.2})
    async with (
        running_worker(settings),
        running_api(settings) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=60) as http,
    ):
        batch_id = (await submit(http, held_writes([*LOST, KEPT]), max_concurrency=4, read_only=False))["id"]
        await lose_records(sentinels, fresh_backend, batch_id)
        await fail_over(sentinels)
        await call_backend(fresh_backend.url, "let_go", {"keys": [KEPT]})  # its record goes to the new primary
        document = await ended_through_the_failover(http, batch_id)
        items = {item["id"]: item for item in await all_results(http, batch_id)}
    tallies = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert tallies == {key: 1 for key in [*LOST, KEPT]}, "a write was sent twice"
    assert document["status"] == "completed" and items[KEPT]["status"] == "ok"
    for key in LOST:
        item = items[key]
        assert (item["status"], item["recovered"], item["error"]["code"]) == ("interrupted", True, "interrupted")
        assert item["error"]["details"]["record_lost"] is True


async def test_a_write_whose_record_a_failover_lost_is_not_sent_again_by_a_worker_taking_its_job_over(
    sentinels: SentinelSet, settings: Settings, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    # The worker that ran the job is killed before the failover (its KEPT call still at the backend): another worker,
    # started on the promoted primary, takes the job over once its lease lapses there, and every item it finds
    # claimed is one whose call may have run.
    settings = settings.model_copy(update={"redis_url": sentinels.url, "sweep_seconds": 0.2, "lease_seconds": 3.0})
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        with worker_processes(settings, 1, tmp_path) as (first,):
            batch_id = (await submit(http, held_writes([*LOST, KEPT]), max_concurrency=4, read_only=False))["id"]
            await lose_records(sentinels, fresh_backend, batch_id)
            first.kill()
            first.wait(10)
        await fail_over(sentinels)
        async with running_worker(settings):
            document = await ended_through_the_failover(http, batch_id)
            items = await all_results(http, batch_id)
    tallies = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert tallies == {key: 1 for key in [*LOST, KEPT]}, "a write was sent twice"
    assert document["status"] == "completed"
    assert {(item["status"], item["recovered"], item["error"]["code"]) for item in items} == {
        ("interrupted", True, "interrupted")
    }
