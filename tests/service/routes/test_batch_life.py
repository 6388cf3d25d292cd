"""A batch's life past the happy path, through the real API and workers: cancel, deadlines, per-call timeouts,
retention, backpressure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import (
    HttpBackendProcess,
    all_results,
    by_id,
    call_backend,
    eventually,
    finished,
    live_workers,
    running_service,
    stamps,
    submit,
    until_at_backend,
    worker_processes,
)


def sleeps(n: int, seconds: float) -> list[dict[str, Any]]:
    return [
        {"id": f"s{i}", "server": "demo_http", "tool": "sleep", "arguments": {"seconds": seconds}} for i in range(n)
    ]


@pytest.mark.serial  # its assertion is a duration
@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_cancel_starts_nothing_new_on_any_worker_within_a_second(
    client: httpx.AsyncClient,
    settings: Settings,
    redis: aioredis.Redis,
    http_backend: HttpBackendProcess,
    tmp_path: Path,
) -> None:
    await call_backend(http_backend.url, "stats", {"reset": True})  # its arrivals are this test's from here on
    with worker_processes(settings, 2, tmp_path):
        await live_workers(redis, 3)
        batch_id = (await submit(client, stamps("demo_http", 300, 0.2), max_concurrency=12))["id"]
        await until_at_backend(http_backend, "arrivals", 12)
        response = await client.post(f"/v1/batches/{batch_id}/cancel")
        acknowledged = time.time()
        assert response.status_code == 200 and response.json()["status"] in ("cancelling", "cancelled")
        document = await finished(client, batch_id)
    arrivals = (await call_backend(http_backend.url, "stats"))["arrivals"]
    late = [t - acknowledged for t in arrivals if t > acknowledged]
    assert not late or max(late) < 1.0, late  # no call started a second or more after the cancel was answered
    print(f"last arrival {max(late, default=0) * 1000:.0f} ms after the cancel was answered; {len(late)} after it")
    assert document["status"] == "cancelled" and document["ok"] is False
    counts = document["counts"]
    assert counts["succeeded"] == len(arrivals) and counts["cancelled"] == 300 - len(arrivals)
    items = await all_results(client, batch_id)
    assert {item["status"] for item in items} == {"ok", "cancelled"}
    again = await client.post(f"/v1/batches/{batch_id}/cancel")
    assert again.status_code == 409 and again.json()["status"] == "cancelled"


async def test_a_cancel_cuts_calls_still_in_flight_after_the_grace(
    settings: Settings, http_backend: HttpBackendProcess
) -> None:
    await call_backend(http_backend.url, "stats", {"reset": True})
    settings = settings.model_copy(update={"cancel_grace_seconds": 0.3})
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        batch_id = (await submit(client, stamps("demo_http", 5, 30), max_concurrency=3))["id"]
        await until_at_backend(http_backend, "arrivals", 3)
        started = time.monotonic()
        assert (await client.post(f"/v1/batches/{batch_id}/cancel")).json()["status"] == "cancelling"
        document = await finished(client, batch_id, timeout=10)
        took = time.monotonic() - started
    assert document["status"] == "cancelled" and took < 5
    assert [item["status"] for item in document["results"]] == ["cancelled"] * 5
    assert all("in flight" in item["error"]["message"] for item in document["results"][:3])
    assert document["counts"]["cancelled"] == 5


async def test_cancelling_an_unknown_batch_is_404(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/batches/nope/cancel")).status_code == 404


async def test_a_passed_deadline_expires_what_has_not_finished(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, sleeps(10, 0.4), max_concurrency=2, deadline_seconds=1.0))["id"]
    document = await finished(client, batch_id, timeout=10)
    assert document["status"] == "expired" and document["deadline_at"]
    statuses = [item["status"] for item in document["results"]]
    done = statuses.count("ok")
    assert 2 <= done <= 6 and statuses == ["ok"] * done + ["expired"] * (10 - done)
    assert document["counts"]["expired"] == 10 - done and document["counts"]["failed"] == 0
    cut = [item for item in document["results"] if "in flight" in (item.get("error") or {}).get("message", "")]
    assert cut and all(item["error"]["code"] == "deadline_exceeded" for item in cut)
    assert document["elapsed_seconds"] < 3


async def test_a_deadline_that_cuts_the_only_call_ends_the_batch_expired(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, sleeps(1, 5), deadline_seconds=1.0))["id"]
    document = await finished(client, batch_id, timeout=10)
    assert document["status"] == "expired" and document["ok"] is False
    item = document["results"][0]
    assert item["status"] == "expired" and item["error"]["code"] == "deadline_exceeded"
    in_time = await finished(client, (await submit(client, sleeps(1, 0), deadline_seconds=30.0))["id"])
    assert in_time["status"] == "completed" and in_time["ok"] is True


async def test_a_call_has_its_own_timeout_within_a_ceiling(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "slow", "server": "demo_http", "tool": "sleep", "arguments": {"seconds": 5}, "timeout_seconds": 0.3}
    ]
    document = await finished(client, (await submit(client, calls))["id"])
    item = by_id(document)["slow"]
    assert item["status"] == "timeout" and item["error"]["details"]["timeout_seconds"] == 0.3
    calls[0]["timeout_seconds"] = 1e9
    response = await client.post("/v1/batches", json={"calls": calls})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "calls", 0, "timeout_seconds"]


async def test_a_finished_batch_is_gone_after_its_retention(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, sleeps(1, 0), retention_seconds=1))["id"]
    document = await finished(client, batch_id)
    assert document["retention_seconds"] == 1 and document["expires_at"]

    async def gone() -> bool:
        return (await client.get(f"/v1/batches/{batch_id}")).status_code == 404

    await eventually(gone, what="the batch expired on Redis's own clock", timeout=10)
    assert (await client.get(f"/v1/batches/{batch_id}")).status_code == 404
    assert (await client.get(f"/v1/batches/{batch_id}/results")).status_code == 404


async def test_a_retention_over_the_ceiling_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/batches", json={"calls": sleeps(1, 0), "retention_seconds": 10**9})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "retention_seconds"]


async def test_past_the_unfinished_bound_a_submit_is_429_and_stores_nothing(
    settings: Settings, redis: aioredis.Redis
) -> None:
    settings = settings.model_copy(update={"max_unfinished_items": 3})
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        first = await submit(client, sleeps(3, 0.5))
        refused = await client.post("/v1/batches", json={"calls": sleeps(1, 0)})
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert "unfinished items" in refused.json()["detail"]
        batches = {key.split(b":")[2].strip(b"{}") for key in await redis.keys("mcpb:batch:*")}
        assert batches == {first["id"].encode()}  # the refused batch left nothing behind
        await finished(client, first["id"])
        assert (await client.post("/v1/batches", json={"calls": sleeps(1, 0)})).status_code == 202
