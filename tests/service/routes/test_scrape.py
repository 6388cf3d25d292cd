"""Prometheus metrics through the real service: the API's /metrics and a worker's own metrics port, after real batches.

Label values stay bounded and clean: an unknown server is `_unknown`, a route is its template, and neither a backend
credential (a header from `${VAR}`) nor an argument value ever appears in a scrape.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import (
    ServiceHandle,
    eventually,
    free_port,
    live_workers,
    metric,
    metric_samples,
    run_batch,
    running_api,
    submit,
)

pytestmark = pytest.mark.timeout(60)

TOKEN = "tok-metrics-4d9e1b7c"  # a backend credential, from the environment
ARGUMENT = "arg-value-8c2f5e0a"  # an argument value
API_KEY = "mcpb_metrics-test-key"


@pytest.fixture
def servers(servers: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("MCPB_METRICS_TEST_TOKEN", TOKEN)
    http = servers["demo_http"]["url"]
    servers["locked"] = {"url": http, "headers": {"Authorization": "Bearer ${MCPB_METRICS_TEST_TOKEN}"}}
    return servers


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"worker_metrics_port": free_port(), "cancel_grace_seconds": 0.0})


def label_values(text: str) -> set[str]:
    return {v for (_, labels) in metric_samples(text) for _, v in labels}


async def scrape_worker(service: ServiceHandle) -> str:
    assert service.worker is not None
    port = service.worker.ctx["state"].metrics.port
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return response.text


async def test_metrics_show_a_batch_its_items_and_their_latency(
    service: ServiceHandle, client: httpx.AsyncClient
) -> None:
    calls = [
        {"server": "demo_http", "tool": "echo", "arguments": {"message": ARGUMENT}},
        {"server": "demo_http", "tool": "echo", "arguments": {"message": "two"}},
        {"server": "demo_http", "tool": "echo", "arguments": {"message": "three"}},
        {"server": "locked", "tool": "echo", "arguments": {"message": ARGUMENT}},
        {"server": "no-such-server-71f3", "tool": "echo", "arguments": {"message": ARGUMENT}},
    ]
    document = await run_batch(client, calls)
    assert document["counts"]["succeeded"] == 4

    async def scrape_once_queue_is_empty() -> str | None:
        # The batch is done once its last record is stored; its shard job leaves arq's queue a moment later.
        text = (await client.get("/metrics")).text
        return text if metric(text, "mcp_batch_queue_depth") == 0 else None

    api = await eventually(scrape_once_queue_is_empty, what="the shard job to leave the queue", timeout=10)
    assert metric(api, "mcp_batch_batches_submitted_total") == 1
    assert metric(api, "mcp_batch_unfinished_items") == 0
    assert metric(api, "mcp_batch_workers_live") == 1
    assert metric(api, "mcp_batch_redis_up") == 1
    assert metric(api, "mcp_batch_backend_leases", server="demo_http") == 0
    get = {"route": "/v1/batches/{batch_id}", "method": "GET", "status": "200"}
    assert (metric(api, "mcp_batch_http_requests_total", **get) or 0) >= 1
    assert metric(api, "mcp_batch_http_requests_total", route="/v1/batches", method="POST", status="202") == 1
    assert document["id"] not in api  # routes are templates, never raw paths

    worker = await scrape_worker(service)
    assert metric(worker, "mcp_batch_items_total", server="demo_http", status="ok") == 3
    assert metric(worker, "mcp_batch_items_total", server="locked", status="ok") == 1
    assert metric(worker, "mcp_batch_items_total", server="_unknown", status="unknown_server") == 1
    assert metric(worker, "mcp_batch_call_seconds_count", server="demo_http") == 3
    assert metric(worker, "mcp_batch_call_seconds_bucket", server="demo_http", le="+Inf") == 3
    assert metric(worker, "mcp_batch_call_seconds_bucket", server="demo_http", le="60.0") == 3
    assert metric(worker, "mcp_batch_rate_wait_seconds_count", server="demo_http") == 3
    assert metric(worker, "mcp_batch_calls_in_flight", server="demo_http") == 0

    for scrape in (api, worker):
        assert not any("no-such-server" in v or TOKEN in v or ARGUMENT in v for v in label_values(scrape))
        assert TOKEN not in scrape and ARGUMENT not in scrape and "no-such-server" not in scrape


async def test_the_worker_counts_its_running_jobs(
    service: ServiceHandle, client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    await live_workers(redis, 1)  # its start-up (and metrics endpoint) done
    batch_id = (await submit(client, [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 30}}]))["id"]
    await worker_shows(service, jobs=1, in_flight=1)
    assert (await client.post(f"/v1/batches/{batch_id}/cancel")).is_success
    await worker_shows(service, jobs=0, in_flight=0)


async def worker_shows(service: ServiceHandle, jobs: int, in_flight: int) -> None:
    """Wait until the worker's endpoint shows this many running jobs and calls in flight to `demo`."""

    async def shown() -> bool:
        scrape = await scrape_worker(service)
        running = metric(scrape, "mcp_batch_worker_jobs_running")
        return running == jobs and metric(scrape, "mcp_batch_calls_in_flight", server="demo") == in_flight

    await eventually(shown, what=f"{jobs} jobs and {in_flight} calls in flight on the worker's endpoint", timeout=20)


USER_KEY = "mcpb_metrics-test-user-key"


def keyed(settings: Settings, tmp_path: Path, **update: Any) -> Settings:
    keys = tmp_path / "keys.json"
    entries = [
        {"sha256": hashlib.sha256(API_KEY.encode()).hexdigest(), "tenant": "ops", "admin": True},
        {"sha256": hashlib.sha256(USER_KEY.encode()).hexdigest(), "tenant": "ops"},
    ]
    keys.write_text(json.dumps({"keys": entries}))
    return settings.model_copy(update={"auth": "keys", "keys": keys, **update})


async def test_metrics_need_an_admin_key_when_auth_is_on(settings: Settings, tmp_path: Path) -> None:
    async with running_api(keyed(settings, tmp_path)) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/metrics")).status_code == 401
        assert (await http.get("/metrics", headers={"Authorization": "Bearer wrong"})).status_code == 401
        refused = await http.get("/metrics", headers={"Authorization": f"Bearer {USER_KEY}"})
        assert refused.status_code == 403 and "'admin'" in refused.text
        scrape = await http.get("/metrics", headers={"Authorization": f"Bearer {API_KEY}"})
        assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain")
        assert metric(scrape.text, "mcp_batch_http_requests_total", route="/metrics", method="GET", status="401") == 2
        assert (await http.get("/readyz")).status_code == 503  # health needs no key (and there is no worker)


async def test_metrics_can_be_public_with_auth_on(settings: Settings, tmp_path: Path) -> None:
    public = keyed(settings, tmp_path, metrics_public=True)
    async with running_api(public) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        assert (await http.get("/metrics")).status_code == 200
        assert (await http.get("/v1/batches")).status_code == 401  # only the scrape is public


async def test_unmatched_paths_and_odd_methods_share_a_few_labels(settings: Settings) -> None:
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        for n in range(3):
            assert (await http.get(f"/no/such/path/{n}")).status_code == 404
        await http.request("PROPFIND", "/v1/batches")  # a method no route takes (one the HTTP parser knows)
        scrape = (await http.get("/metrics")).text
    assert metric(scrape, "mcp_batch_http_requests_total", route="_unmatched", method="GET", status="404") == 3
    assert metric(scrape, "mcp_batch_http_requests_total", route="/v1/batches", method="other", status="405") == 1
    assert "/no/such/path" not in scrape and "PROPFIND" not in scrape
