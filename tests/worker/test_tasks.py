"""One batch, many workers: a concurrent batch is sharded across every live worker; order-bound batches are not."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import (
    HttpBackendProcess,
    call_backend,
    counted_servers,  # noqa: F401 - this module's `servers` fixture
    live_workers,
    run_batch,
    stamps,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


async def test_a_large_batch_is_shared_by_every_worker_within_its_concurrency(
    client: httpx.AsyncClient,
    settings: Settings,
    redis: aioredis.Redis,
    fresh_backend: HttpBackendProcess,
    tmp_path: Path,
) -> None:
    with worker_processes(settings, 2, tmp_path):
        await live_workers(redis, 3)  # the suite's own worker and two processes
        document = await run_batch(client, stamps("counted", 300, 0.03), max_concurrency=12)
    assert document["ok"] is True
    shares = Counter(item["worker"] for item in document["results"])
    assert len(shares) == 3 and min(shares.values()) >= 30, shares  # each did a substantial part
    assert (await call_backend(fresh_backend.url, "stats"))["in_flight_max"] <= 12  # max_concurrency held across all


async def test_serial_and_linked_batches_stay_in_one_shard(
    client: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    with worker_processes(settings, 1, tmp_path):
        await live_workers(redis, 2)
        serial = await run_batch(client, stamps("counted", 60), mode="serial")
        linked_calls = [{"id": "first", "server": "counted", "tool": "measure"}] + [
            {"server": "counted", "tool": "reflect", "arguments": {"data": "@first.value"}} for _ in range(59)
        ]
        linked = await run_batch(client, linked_calls, max_concurrency=16)
    assert len({item["worker"] for item in serial["results"]}) == 1
    assert len({item["worker"] for item in linked["results"]}) == 1
    assert all(item["structured_content"]["data"] == 21.5 for item in linked["results"][1:])
