"""The dry run's estimate against the real service and worker: a rate-limited backend of the test's own."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.support import HttpBackendProcess, eventually, finished, running_service, stamps, submit

EXAMPLE = Path(__file__).parents[3] / "examples" / "batch.json"

pytestmark = pytest.mark.timeout(120)

RATE = 40  # calls per second: a 200-call batch takes five seconds
ALPHA, BETA = "mcpb_alpha-key", "mcpb_beta-key"


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["limited"] = {"url": fresh_backend.url, "rate_limit": {"per_second": RATE, "burst": 1}}
    servers["capped"] = {"url": fresh_backend.url, "max_concurrency": 2}
    return servers


async def estimate(client: httpx.AsyncClient, calls: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    response = await client.post("/v1/batches:validate", json={"calls": calls, **options})
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()["estimate"]
    return found


async def test_without_a_latency_sample_the_estimate_says_so_and_names_the_rate_bound(
    client: httpx.AsyncClient,
) -> None:
    found = await estimate(client, stamps("limited", 200))
    assert found["complete"] is False and found["unknown_latency"] == ["limited/stamp"]
    assert found["bound"]["kind"] == "rate_limit" and found["bound"]["server"] == "limited"
    assert found["seconds"] == pytest.approx(199 / RATE)
    unsampled = {"server": "limited", "tool": "stamp", "calls": 200, "samples": 0, "mean_seconds": None}
    assert found["latency"] == [unsampled]


async def test_the_batchs_own_concurrency_bounds_slow_calls_once_their_latency_is_known(
    client: httpx.AsyncClient,
) -> None:
    assert (await finished(client, (await submit(client, stamps("demo_http", 4, 0.1)))["id"]))["ok"]
    found = await estimate(client, stamps("demo_http", 40, 0.1), max_concurrency=4)
    assert found["complete"] is True and found["bound"]["kind"] == "max_concurrency"
    mean = found["latency"][0]["mean_seconds"]
    assert mean >= 0.1 and found["seconds"] == pytest.approx(40 * mean / 4, abs=0.002)
    assert (await estimate(client, stamps("capped", 40, 0.1), max_concurrency=8))["complete"] is False


async def test_work_queued_for_the_backend_counts_until_it_is_cancelled(client: httpx.AsyncClient) -> None:
    alone = await estimate(client, stamps("limited", 100))
    ahead = await submit(client, stamps("limited", 2_000), max_concurrency=4)
    queued = await estimate(client, stamps("limited", 100))
    assert queued["backends"][0]["queued_ahead"] > 1_900
    assert queued["seconds"] > alone["seconds"] + 1_900 / RATE
    assert (await client.post(f"/v1/batches/{ahead['id']}/cancel")).status_code == 200
    await finished(client, ahead["id"])
    assert (await estimate(client, stamps("limited", 100)))["backends"][0]["queued_ahead"] == 0


async def test_work_of_a_batch_past_its_deadline_no_longer_counts(client: httpx.AsyncClient) -> None:
    ahead = await submit(client, stamps("limited", 1_000), max_concurrency=2, deadline_seconds=3)
    assert (await estimate(client, stamps("limited", 10)))["backends"][0]["queued_ahead"] > 900
    assert (await finished(client, ahead["id"]))["status"] == "expired"
    assert (await estimate(client, stamps("limited", 10)))["backends"][0]["queued_ahead"] == 0


@pytest.mark.serial
async def test_the_estimate_of_a_rate_limited_batch_is_within_a_quarter_of_its_wall_time(
    client: httpx.AsyncClient,
) -> None:
    """The issue's requirement: a 200-call batch against a rate-limited backend, ±25 %."""
    assert (await finished(client, (await submit(client, stamps("limited", 10)))["id"]))["ok"]  # a latency sample

    async def sampled() -> dict[str, Any] | None:
        found = await estimate(client, stamps("limited", 200))
        return found if found["complete"] else None

    found = await eventually(sampled, what="the workers' latency sample of limited/stamp", timeout=10)
    start = time.monotonic()
    document = await finished(client, (await submit(client, stamps("limited", 200)))["id"])
    actual = time.monotonic() - start
    assert document["ok"] is True
    assert abs(found["seconds"] - actual) <= 0.25 * actual, (found, actual)


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    keys = [{"sha256": hash_key(key), "tenant": tenant} for key, tenant in [(ALPHA, "alpha"), (BETA, "beta")]]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    return settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json"})


async def test_another_tenants_437_queued_calls_and_its_latencies_move_nothing_a_tenant_sees(keyed: Settings) -> None:
    async with (
        running_service(keyed) as service,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {ALPHA}"}) as alpha,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {BETA}"}) as beta,
    ):
        assert (await finished(beta, (await submit(beta, stamps("demo_http", 4, 0.05)))["id"]))["ok"]
        before = await estimate(alpha, stamps("limited", 1) + stamps("demo_http", 1))
        queued = await submit(beta, stamps("limited", 437), max_concurrency=1)
        assert (await estimate(beta, stamps("limited", 1)))["backends"][0]["queued_ahead"] > 400  # beta's own view
        after = await estimate(alpha, stamps("limited", 1) + stamps("demo_http", 1))
        assert after == before
        assert [b["queued_ahead"] for b in after["backends"]] == [0, 0]
        assert [t["samples"] for t in after["latency"]] == [0, 0]  # beta's demo_http calls are beta's alone
        await beta.post(f"/v1/batches/{queued['id']}/cancel")


async def within_a_quarter(client: httpx.AsyncClient, batch: dict[str, Any], first: str) -> None:
    """The estimate once every tool's latency is sampled by a first run, and the wall time of a second run (submit
    to finish, as the document says); the estimate's bound must be `first`."""
    options = {key: value for key, value in batch.items() if key != "calls"}
    await finished(client, (await submit(client, batch["calls"], **options))["id"])

    async def sampled() -> dict[str, Any] | None:
        found = await estimate(client, batch["calls"], **options)
        return found if found["complete"] else None

    found = await eventually(sampled, what="a latency sample of every tool", timeout=10)
    document = await finished(client, (await submit(client, batch["calls"], **options))["id"])
    actual = document["elapsed_seconds"]
    print(f"estimate {found['seconds']:.3f} s ({found['bound']['kind']}), wall time {actual:.3f} s")
    assert found["bound"]["kind"] == first, found
    assert abs(found["seconds"] - actual) <= 0.25 * actual, (found, actual)


@pytest.mark.serial
async def test_the_estimate_of_the_readmes_example_is_within_a_quarter_of_its_wall_time(
    client: httpx.AsyncClient,
) -> None:
    """The example's one half-second call bounds it, whatever its eight lanes."""
    await within_a_quarter(client, json.loads(EXAMPLE.read_text()), "longest_call")


@pytest.mark.serial
async def test_the_estimate_of_calls_ten_times_apart_in_length_is_within_a_quarter_of_its_wall_time(
    client: httpx.AsyncClient,
) -> None:
    """One 1 s call and twelve of 0.1 s over three lanes: the long call bounds it (the short ones take 0.6 s on the
    other two lanes); over one lane, the sum."""
    long = {"id": "long", "server": "demo", "tool": "sleep", "arguments": {"seconds": 1.0}}
    short = [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 0.1}} for _ in range(12)]
    await within_a_quarter(client, {"calls": [long, *short], "max_concurrency": 3}, "longest_call")
    await within_a_quarter(client, {"calls": [long, *short], "mode": "serial"}, "max_concurrency")
