"""The data plane on a real 3-master Redis Cluster (one per module, started on loopback ports), the control plane on
the suite's Redis: the engine's main paths through the API and workers, and the start-up errors for a URL of the
wrong kind. The same code serves both; only the connection differs."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.backends.priority import Priorities
from mcp_batch.errors import ConfigError
from mcp_batch.keys import Keys
from mcp_batch.models import Priority
from mcp_batch.settings import Settings
from mcp_batch.store import Store
from mcp_batch.store.connection import connect, control_pool
from tests.redis_cluster import ClusterServers
from tests.redis_server import ENGINES
from tests.support import (
    HttpBackendProcess,
    all_results,
    call_backend,
    eventually,
    finished,
    live_workers,
    most_in_window,
    running_api,
    running_service,
    stamps,
    submit,
    worker_id,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module", params=ENGINES)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    """Three masters, no replicas, of each engine: one cluster at a time for the module's tests (each flushes it)."""
    servers = ClusterServers(tmp_path_factory.mktemp("cluster"), masters=3, engine=request.param)
    servers.start()
    yield servers
    servers.stop()


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["counted"] = {"url": fresh_backend.url}
    servers["capped"] = {"url": fresh_backend.url, "max_concurrency": 3}
    servers["limited"] = {"url": fresh_backend.url, "rate_limit": {"per_second": 20, "burst": 4}}
    return servers


@pytest.fixture
def on_cluster(settings: Settings, cluster: ClusterServers) -> Settings:
    cluster.flush()
    return settings.model_copy(update={"data_redis_url": cluster.url})


@pytest.fixture
async def client(on_cluster: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_service(on_cluster) as handle, httpx.AsyncClient(base_url=handle.base_url, timeout=90) as http:
        yield http


def echoes(n: int, prefix: str = "e") -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i}", "server": "demo", "tool": "echo", "arguments": {"message": str(i)}} for i in range(n)
    ]


async def test_a_batch_runs_on_the_cluster_and_reads_back_as_document_results_and_events(
    client: httpx.AsyncClient, cluster: ClusterServers
) -> None:
    batch_id = (await submit(client, echoes(50), max_concurrency=8))["id"]
    document = await finished(client, batch_id)
    assert document["status"] == "completed" and document["counts"]["total"] == 50 and document["ok"]
    assert [item["content"][0]["text"] for item in await all_results(client, batch_id)] == [str(i) for i in range(50)]
    lines = (await client.get(f"/v1/batches/{batch_id}/results", params={"after": 40})).text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(41, 51))
    async with client.stream("GET", f"/v1/batches/{batch_id}/events") as response:
        events = [line async for line in response.aiter_lines() if line.startswith("event: ")]
    assert events.count("event: item") == 50 and events[-1] == "event: end"
    # Its keys sit on one master (one slot), and on the data plane only.
    holder = cluster.master_of(Keys().batch(batch_id))
    with holder.client() as node:
        assert node.exists(Keys().batch(batch_id), Keys().results(batch_id), Keys().calls(batch_id)) == 3


async def test_cancel_retry_and_idempotency_on_the_cluster(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    slow = [{"id": f"s{i}", "server": "demo", "tool": "sleep", "arguments": {"seconds": 0.3}} for i in range(40)]
    batch_id = (await submit(client, slow, max_concurrency=2))["id"]
    assert (await client.post(f"/v1/batches/{batch_id}/cancel")).status_code in (200, 202)
    document = await finished(client, batch_id)
    assert document["status"] == "cancelled" and document["counts"]["cancelled"] > 0
    retried = await client.post(f"/v1/batches/{batch_id}/retry", json={})
    assert retried.status_code == 202, retried.text
    again = await finished(client, retried.json()["id"])
    assert again["status"] == "completed" and again["retry_of"] == batch_id
    headers = {"Idempotency-Key": "k1"}
    first = await client.post("/v1/batches", json={"calls": echoes(3)}, headers=headers)
    second = await client.post("/v1/batches", json={"calls": echoes(3)}, headers=headers)
    assert (first.status_code, second.status_code) == (202, 200) and first.json()["id"] == second.json()["id"]
    # Ended batches left nothing counted on the control plane.
    await eventually(lambda: _unfinished(redis), what="the unfinished count back to 0")


async def _unfinished(redis: aioredis.Redis) -> bool:
    return int(await redis.get(Keys().unfinished) or 0) == 0


async def test_30_batches_land_10_on_each_of_the_3_masters(client: httpx.AsyncClient, cluster: ClusterServers) -> None:
    ids = [(await submit(client, echoes(2)))["id"] for _ in range(30)]
    holders = [cluster.master_of(Keys().batch(batch_id)).port for batch_id in ids]
    assert sorted(holders.count(node.port) for node in cluster.masters()) == [10, 10, 10]
    assert len(set(ids)) == 30 and all(len(batch_id) == 32 for batch_id in ids)


async def test_backend_limits_hold_across_two_worker_processes_on_the_cluster(
    client: httpx.AsyncClient,
    on_cluster: Settings,
    redis: aioredis.Redis,
    fresh_backend: HttpBackendProcess,
    tmp_path: Path,
) -> None:
    with worker_processes(on_cluster, 2, tmp_path):
        await live_workers(redis, 3)
        capped = await finished(client, (await submit(client, stamps("capped", 60, 0.05), max_concurrency=16))["id"])
        assert (await call_backend(fresh_backend.url, "stats"))["in_flight_max"] == 3
        limited = await finished(client, (await submit(client, stamps("limited", 40)))["id"])
    assert capped["ok"] and limited["ok"]
    assert len({item["worker"] for item in capped["results"]}) >= 2
    arrivals = (await call_backend(fresh_backend.url, "stats"))["arrivals"]
    assert most_in_window(arrivals[-40:], 1.0) <= 25


async def test_a_worker_killed_mid_batch_is_taken_over_on_the_cluster(
    on_cluster: Settings, redis: aioredis.Redis, fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    settings = on_cluster.model_copy(update={"lease_seconds": 2.0, "sweep_seconds": 0.2})
    calls = [
        {"id": f"w{i}", "server": "counted", "tool": "tally_write", "arguments": {"key": f"w{i}", "seconds": 0.05}}
        for i in range(200)
    ]
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=90) as api:
        with worker_processes(settings, 2, tmp_path) as (victim, survivor):
            await live_workers(redis, 2)
            batch_id = (await submit(api, calls, max_concurrency=16, read_only=False))["id"]

            async def victim_started() -> bool:
                records = await _records(settings, batch_id)
                return sum(r.get("worker") == worker_id(victim) for r in records) >= 10

            await eventually(victim_started, what="items finished by the worker to kill")
            victim.send_signal(signal.SIGKILL)
            document = await finished(api, batch_id, timeout=90)
        items = await all_results(api, batch_id)
    counts = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert document["status"] == "completed" and len(items) == 200
    assert all(counts.get(item["id"], 0) <= 1 for item in items)  # no write ran twice
    assert any(item["recovered"] for item in items) and worker_id(survivor) in {item["worker"] for item in items}


async def _records(settings: Settings, batch_id: str) -> list[dict[str, Any]]:
    assert settings.data_redis_url is not None
    data = await connect(settings.data_redis_url, settings)
    try:
        return [json.loads(r) for r in await data.hvals(Keys().results(batch_id))]
    finally:
        await data.aclose()


async def test_metadata_priority_the_estimate_and_delete_on_the_cluster(
    client: httpx.AsyncClient, cluster: ClusterServers
) -> None:
    tagged = (await submit(client, echoes(3), metadata={"job": "nightly"}, priority="high"))["id"]
    assert (await finished(client, tagged))["ok"]
    slow = [{"id": f"s{i}", "server": "demo", "tool": "sleep", "arguments": {"seconds": 0.5}} for i in range(20)]
    running = (await submit(client, slow, max_concurrency=1))["id"]
    dry = (await client.post("/v1/batches:validate", json={"calls": slow})).json()["estimate"]
    assert dry["backends"][0]["queued_ahead"] > 0  # the live batch, found on the control plane, read on the data
    listed = (await client.get("/v1/batches", params={"metadata.job": "nightly"})).json()["batches"]
    assert [b["id"] for b in listed] == [tagged]
    assert (await client.delete(f"/v1/batches/{running}")).status_code == 409
    assert (await client.post(f"/v1/batches/{running}/cancel")).status_code in (200, 202)
    await finished(client, running)
    for batch_id in (tagged, running):
        assert (await client.delete(f"/v1/batches/{batch_id}")).status_code == 204
        assert (await client.get(f"/v1/batches/{batch_id}")).status_code == 404
        with cluster.master_of(Keys().batch(batch_id)).client() as node:
            assert node.exists(Keys().batch(batch_id), Keys().calls(batch_id), Keys().results(batch_id)) == 0
    assert (await client.get("/v1/batches", params={"metadata.job": "nightly"})).json()["batches"] == []
    assert (await client.get("/v1/batches")).json()["batches"] == []


async def test_questions_progress_and_priority_holds_touch_one_slot_each(
    on_cluster: Settings, redis: aioredis.Redis, cluster: ClusterServers
) -> None:
    assert on_cluster.data_redis_url is not None
    data = await connect(on_cluster.data_redis_url, on_cluster)
    try:
        store, keys = Store.from_settings(data, on_cluster, control=redis), Keys()
        await store.questions.ask("b1", 0, b'{"id": "q1"}', 5)
        assert await store.questions.answer("b1", 0, "q1", b'{"ok": 1}', 5, "acme")
        assert await store.questions.take("b1", 0, "q1", withdraw=True) == b'{"ok": 1}'
        await store.progress.put("b1", 2, {"progress": 1})
        assert await store.progress.every("b1") == {2: {"progress": 1}}
        servers = ["counted", "capped", "limited"]
        assert len({cluster.master_of(keys.priority(s, "t")).port for s in servers}) > 1  # on several masters
        await Priorities(data, keys).hold(servers, "t", Priority.high, "job-1", 5)
        assert all([await data.hlen(keys.priority(s, "t")) == 1 for s in servers])
        await Priorities(data, keys).release(servers, "t", Priority.high, "job-1")
        assert all([await data.hlen(keys.priority(s, "t")) == 0 for s in servers])
    finally:
        await data.aclose()


async def test_a_cluster_node_given_as_a_standalone_url_names_the_setting(
    settings: Settings, cluster: ClusterServers
) -> None:
    node = cluster.nodes[0].port
    with pytest.raises(ConfigError, match="MCP_BATCH_DATA_REDIS_URL points at a Redis Cluster node; write it redis"):
        await connect(f"redis://127.0.0.1:{node}/0", settings)
    with pytest.raises(ConfigError, match="MCP_BATCH_REDIS_URL points at a Redis Cluster node"):
        await control_pool(settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{node}/0"}))
    with pytest.raises(ConfigError, match="MCP_BATCH_REDIS_URL cannot be a Redis Cluster"):
        await control_pool(settings.model_copy(update={"redis_url": cluster.url}))


async def test_a_cluster_url_naming_a_standalone_redis_is_refused(settings: Settings) -> None:
    standalone = settings.redis_url.split("//")[1].split("/")[0]
    with pytest.raises(ConfigError, match="names redis\\+cluster:// but its node is no Redis Cluster"):
        await connect(f"redis+cluster://{standalone}", settings)
