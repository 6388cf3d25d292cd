"""Backend limits across several real worker processes, measured at the backend itself."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import (
    HttpBackendProcess,
    call_backend,
    finished,
    live_workers,
    most_in_window,
    stamps,
    submit,
    until_succeeded,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["limited"] = {"url": fresh_backend.url, "rate_limit": {"per_second": 20, "burst": 4}}
    servers["capped"] = {"url": fresh_backend.url, "max_concurrency": 3}
    return servers


async def test_a_rate_limit_holds_across_worker_processes(
    client: httpx.AsyncClient,
    settings: Settings,
    redis: aioredis.Redis,
    fresh_backend: HttpBackendProcess,
    tmp_path: Path,
) -> None:
    with worker_processes(settings, 2, tmp_path):
        await live_workers(redis, 3)
        documents = [await finished(client, (await submit(client, stamps("limited", 60)))["id"])]  # 2 shards
    arrivals = (await call_backend(fresh_backend.url, "stats"))["arrivals"]
    assert len(arrivals) == 60 and all(d["ok"] for d in documents)
    assert len({item["worker"] for d in documents for item in d["results"]}) >= 2
    # 20/s with bursts of 4: at most 24 in any second and 6 in any 100 ms (one more for scheduling jitter)
    assert most_in_window(arrivals, 1.0) <= 25
    assert most_in_window(arrivals, 0.1) <= 7
    assert max(arrivals) - min(arrivals) >= (60 - 4) / 20 * 0.95  # and the limit was enforced, not undercut
    assert documents[0]["limits"] == {
        "limited": {"max_concurrency": None, "rate_limit": {"per_second": 20, "burst": 4}}
    }
    assert max(item["rate_wait_seconds"] for d in documents for item in d["results"]) > 0


async def test_a_concurrency_cap_holds_across_worker_processes(
    client: httpx.AsyncClient,
    settings: Settings,
    redis: aioredis.Redis,
    fresh_backend: HttpBackendProcess,
    tmp_path: Path,
) -> None:
    with worker_processes(settings, 2, tmp_path):
        await live_workers(redis, 3)
        document = await finished(client, (await submit(client, stamps("capped", 100, 0.05), max_concurrency=16))["id"])
        servers = {s["name"]: s for s in (await client.get("/v1/servers")).json()}
    assert document["ok"] is True and len({item["worker"] for item in document["results"]}) >= 2
    assert (await call_backend(fresh_backend.url, "stats"))["in_flight_max"] == 3
    assert servers["capped"]["max_concurrency"] == 3 and servers["capped"]["in_flight"] == 0


async def test_a_429_holds_every_caller_back_and_the_call_is_retried(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    await call_backend(fresh_backend.url, "refuse_next", {"count": 1, "retry_after": 1.5})
    document = await finished(client, (await submit(client, stamps("limited", 6), max_concurrency=2))["id"])
    assert document["ok"] is True
    assert sorted(item["attempts"] for item in document["results"]) == [1, 1, 1, 1, 1, 2]
    arrivals = sorted((await call_backend(fresh_backend.url, "stats"))["arrivals"])
    # the other lane, not refused itself, paused too: one gap of the Retry-After, where 50 ms was due
    assert max(b - a for a, b in pairwise(arrivals)) >= 1.4


@pytest.mark.serial  # its assertion is a duration
async def test_a_small_batch_is_not_starved_by_a_huge_one(
    client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    with worker_processes(settings, 1, tmp_path):
        huge = (await submit(client, stamps("limited", 200), max_concurrency=16))["id"]
        await until_succeeded(client, huge, 10)
        small = await finished(client, (await submit(client, stamps("limited", 10), max_concurrency=16))["id"])
        progress = (await client.get(f"/v1/batches/{huge}")).json()
    assert small["ok"] is True and progress["status"] == "running"
    # both shared the bucket: the small batch took about its share (10 of every 26 slots), not the huge one's tail
    assert small["elapsed_seconds"] < 4
