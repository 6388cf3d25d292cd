"""A worker's metrics endpoint: its address (loopback by default), its port (and the next ones when it is taken),
retries by reason, take-overs."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.support import (
    HttpBackendProcess,
    call_backend,
    eventually,
    finished,
    free_port,
    live_workers,
    metric,
    run_batch,
    running_api,
    running_service,
    running_worker,
    submit,
    worker_processes,
)
from worker.metrics import WorkerMetrics, retry_reason

pytestmark = pytest.mark.timeout(60)


@contextmanager
def taken_port() -> Iterator[int]:
    """A port some other process listens on (as another worker on this host would)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


async def scrape(port: int | None) -> str:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    return response.text


async def test_a_taken_metrics_port_moves_on_to_the_next_free_one(caplog: pytest.LogCaptureFixture) -> None:
    metrics = WorkerMetrics(["demo"])
    with taken_port() as port:
        metrics.serve(port)
        try:
            assert metrics.port is not None and port < metrics.port <= port + 16
            assert "mcp_batch_calls_in_flight" in await scrape(metrics.port)
        finally:
            await metrics.close()
    assert f"metrics port {port} is taken" in caplog.text and f"on port {metrics.port or ''}" in caplog.text


async def test_a_worker_whose_metrics_ports_are_all_taken_runs_without_them(caplog: pytest.LogCaptureFixture) -> None:
    metrics = WorkerMetrics([])
    with taken_port() as port:
        metrics.serve(port, span=0)
    assert metrics.port is None
    assert "all taken; this worker runs without a metrics endpoint" in caplog.text


async def test_a_worker_serves_its_metrics_on_loopback_unless_told_otherwise(settings: Settings) -> None:
    assert Settings.model_fields["worker_metrics_host"].default == "127.0.0.1"
    async with running_worker(settings.model_copy(update={"worker_metrics_port": free_port()})) as worker:
        endpoint = worker.ctx["state"].metrics.endpoint
        assert endpoint is not None and endpoint.server_address[0] == "127.0.0.1"
    everywhere = settings.model_copy(update={"worker_metrics_port": free_port(), "worker_metrics_host": "0.0.0.0"})
    async with running_worker(everywhere) as worker:
        endpoint = worker.ctx["state"].metrics.endpoint
        assert endpoint is not None and endpoint.server_address[0] == "0.0.0.0"
        assert "mcp_batch_calls_in_flight" in await scrape(endpoint.server_port)


async def test_metrics_port_zero_serves_nothing(settings: Settings) -> None:
    async with running_worker(settings) as worker:
        assert worker.ctx["state"].metrics.port is None


@pytest.fixture
def servers(servers: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, Any]:
    if "fresh_backend" in request.fixturenames:
        servers["flaky"] = {"url": request.getfixturevalue("fresh_backend").url}
    return servers


async def test_retries_are_counted_by_server_and_reason(settings: Settings, fresh_backend: HttpBackendProcess) -> None:
    await call_backend(fresh_backend.url, "fail_next", {"count": 1, "status": 503})
    ported = settings.model_copy(update={"worker_metrics_port": free_port()})
    async with running_service(ported) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        document = await run_batch(client, [{"server": "flaky", "tool": "stamp"}])
        assert document["results"][0]["attempts"] == 2
        assert service.worker is not None
        text = await scrape(service.worker.ctx["state"].metrics.port)
    assert metric(text, "mcp_batch_retries_total", server="flaky", reason="http_5xx") == 1
    assert metric(text, "mcp_batch_call_seconds_count", server="flaky") == 2  # each attempt is timed


def test_retry_reasons_name_the_failure() -> None:
    from mcp_batch.errors import BackendError, BackendThrottled

    assert retry_reason(BackendThrottled("'x' refused the call (HTTP 429)", 1.0)) == "http_429"
    assert retry_reason(BackendError("'x' answered HTTP 502", transient=True)) == "http_5xx"
    assert retry_reason(BackendError("connection to 'x' failed: OSError", transient=True)) == "connection"


@pytest.mark.slow
async def test_a_take_over_is_counted_by_the_worker_that_made_it(
    settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"lease_seconds": 2.0, "sweep_seconds": 0.2})
    calls = [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 0.2}} for _ in range(20)]
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=60) as api:
        with worker_processes(settings, 1, tmp_path) as (victim,):
            await live_workers(redis, 1)
            batch_id = (await submit(api, calls, mode="serial"))["id"]
            await eventually(lambda: redis.hlen(Keys().results(batch_id)), what="a first record")
            victim.send_signal(signal.SIGKILL)
            await asyncio.to_thread(victim.wait, 10)
        rescuer = settings.model_copy(update={"worker_metrics_port": free_port()})
        async with running_worker(rescuer) as worker:
            document = await finished(api, batch_id)
            text = await scrape(worker.ctx["state"].metrics.port)
    assert document["status"] == "completed"
    assert metric(text, "mcp_batch_takeovers_total") == 1


@pytest.fixture(autouse=True)
def _info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="worker.metrics")
