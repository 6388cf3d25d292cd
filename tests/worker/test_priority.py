"""Priority within a tenant's share of a rate-limited backend, with the real service and worker: a `high` batch
goes ahead of the same tenant's `low` one, which keeps its minimum share."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest

from mcp_batch.client import AsyncClient
from mcp_batch.models import Call, Priority
from mcp_batch.settings import Settings
from tests.support import (
    HttpBackendProcess,
    ServiceHandle,
    finished,
    running_service,
    stamps,
    submit,
    succeeded,
    until_succeeded,
)

NDJSON = {"content-type": "application/x-ndjson"}

pytestmark = pytest.mark.timeout(120)

# calls per second: the 20-call high batch alone takes about a second (its rate, not the machine's load, dominates),
# the 5,000 low ones would take four minutes (they are cancelled)
RATE = 20


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["limited"] = {"url": fresh_backend.url, "rate_limit": {"per_second": RATE, "burst": 1}}
    return servers


async def _timed(client: httpx.AsyncClient, calls: list[dict[str, Any]], **options: Any) -> tuple[float, Any]:
    start = time.monotonic()
    document = await finished(client, (await submit(client, calls, **options))["id"])
    return time.monotonic() - start, document


async def test_the_priority_is_shown_in_the_document_and_the_list(client: httpx.AsyncClient) -> None:
    document = await submit(client, stamps("demo", 1), priority="high")
    assert document["priority"] == "high"
    listed = (await client.get("/v1/batches")).json()["batches"]
    assert [b["priority"] for b in listed] == ["high"]
    assert (await submit(client, stamps("demo", 1)))["priority"] == "normal"
    refused = await client.post("/v1/batches", json={"calls": stamps("demo", 1), "priority": "urgent"})
    assert refused.status_code == 422 and "priority" in refused.text and "urgent" not in refused.text


async def test_the_client_and_a_json_lines_upload_take_the_priority(
    client: httpx.AsyncClient, service: ServiceHandle
) -> None:
    lines = b"".join(orjson.dumps(call) + b"\n" for call in stamps("demo", 2))
    uploaded = await client.post("/v1/batches", content=lines, headers=NDJSON, params={"priority": "low"})
    assert uploaded.status_code == 202 and uploaded.json()["priority"] == "low"
    async with AsyncClient(service.base_url) as python:
        document = await python.submit([Call(server="demo", tool="stamp")], priority=Priority.high)
        assert document.priority is Priority.high
        assert (await python.validate(stamps("limited", 5), priority="high")).estimate is not None
        assert [b.priority for b in (await python.list()).batches][:2] == [Priority.high, Priority.low]


@pytest.mark.serial
async def test_a_high_batch_finishes_within_half_again_its_time_alone_beside_a_large_low_one(
    client: httpx.AsyncClient,
) -> None:
    """The issue's requirement: 20 `high` calls beside 5,000 `low` ones of the same tenant, on one backend."""
    await _timed(client, stamps("limited", 2))  # the session is open before anything is timed
    alone, document = await _timed(client, stamps("limited", 20), priority="high", max_concurrency=20)
    assert document["ok"] is True
    low = await submit(client, stamps("limited", 5_000), priority="low")
    await until_succeeded(client, low["id"], 20)  # running at the full rate
    beside, document = await _timed(client, stamps("limited", 20), priority="high", max_concurrency=20)
    assert document["ok"] is True
    assert beside <= 1.5 * alone, (beside, alone)
    # The low batch's progress meanwhile is its minimum share (a tenth): two calls in expectation beside 20, too few
    # to assert here; the next test runs the high batch long enough for the share to show.
    assert (await client.post(f"/v1/batches/{low['id']}/cancel")).status_code == 200
    await finished(client, low["id"])


async def test_a_low_batch_keeps_its_minimum_share_while_a_high_one_runs(client: httpx.AsyncClient) -> None:
    low = await submit(client, stamps("limited", 5_000), priority="low")
    await until_succeeded(client, low["id"], 10)
    high = await submit(client, stamps("limited", 80), priority="high")
    await until_succeeded(client, high["id"], 20)
    before, start = await succeeded(client, low["id"]), time.monotonic()
    await until_succeeded(client, high["id"], 70)
    rate = (await succeeded(client, low["id"]) - before) / (time.monotonic() - start)
    assert 0 < rate < RATE * 0.3  # its share (a tenth), not its full rate, and not nothing
    for batch in (low, high):
        await client.post(f"/v1/batches/{batch['id']}/cancel")
        await finished(client, batch["id"])


async def test_a_high_batchs_jobs_are_taken_before_those_already_waiting(settings: Settings) -> None:
    async with (
        running_service(settings.model_copy(update={"worker_max_jobs": 1})) as handle,
        httpx.AsyncClient(base_url=handle.base_url, timeout=60) as client,
    ):
        busy = await submit(client, stamps("limited", 5_000), max_concurrency=1)  # holds the worker's one job slot
        await until_succeeded(client, busy["id"], 1)
        waiting = await submit(client, stamps("demo", 1))
        high = await submit(client, stamps("demo", 1), priority="high")
        assert (await client.post(f"/v1/batches/{busy['id']}/cancel")).status_code == 200
        ended = [await finished(client, batch["id"]) for batch in (busy, waiting, high)]
    assert ended[2]["started_at"] < ended[1]["started_at"]
