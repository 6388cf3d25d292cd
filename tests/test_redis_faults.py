"""Redis faults: a Redis of the test's own (append-only, on its own port) stopped and started again under the service.

A batch running through a restart completes with every item's result recorded exactly once (a claim whose reply
was lost when Redis stopped is run by a replacement job when its shard ends); while Redis is down the API answers
503 with one clear sentence and a worker process keeps running; both recover by themselves.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from redis.exceptions import BusyLoadingError, ConnectionError

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.outage import with_redis_retry
from service.http_errors import install_error_handlers
from service.middleware import StorageUnavailable
from tests.redis_server import APPEND_ALWAYS, RedisServer
from tests.support import (
    HttpBackendProcess,
    call_backend,
    eventually,
    finished,
    free_port,
    run_batch,
    running_service,
    stdio_demo,
    submit,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

UNAVAILABLE = {"detail": "storage unavailable, try again shortly"}


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A Redis of the test's own, every write fsynced before the reply (`appendfsync always`), so even a SIGKILL
    loses nothing a client was told is written."""
    server = RedisServer(tmp_path / "redis", APPEND_ALWAYS)
    await server.start()
    yield server
    await server.stop(signal.SIGKILL)


def settings_for(server: RedisServer, tmp_path: Path, servers: dict[str, Any]) -> Settings:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return Settings(redis_url=server.url, servers=path, auth="none")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_a_batch_runs_through_a_redis_restart_with_every_result_recorded_once(
    redis_server: RedisServer, fresh_backend: HttpBackendProcess, tmp_path: Path, how: signal.Signals
) -> None:
    # Limits loose enough not to slow the batch, so that every call also takes a lease and a rate slot in Redis.
    limited = {"url": fresh_backend.url, "max_concurrency": 8, "rate_limit": {"per_second": 500, "burst": 50}}
    settings = settings_for(redis_server, tmp_path, {"demo": stdio_demo(), "counted": limited})
    stamp = {"server": "counted", "tool": "stamp", "arguments": {"seconds": 0.1}}  # the backend counts these
    sleep = {"server": "demo", "tool": "sleep", "arguments": {"seconds": 0.1}}  # and these go over stdio
    calls = [sleep if i % 4 == 0 else stamp for i in range(200)]
    async with (
        running_service(settings) as service,
        httpx.AsyncClient(base_url=service.base_url, timeout=60) as client,
        aioredis.Redis.from_url(redis_server.url) as redis,
    ):
        batch_id = (await submit(client, calls, max_concurrency=8))["id"]
        finished_key = Keys().finished(batch_id)

        async def a_quarter_done() -> bool:
            return int(await redis.llen(finished_key)) >= 50

        await eventually(a_quarter_done, what="a quarter of the batch finished")
        await redis_server.stop(how)
        assert (await client.get("/healthz")).status_code == 503
        await asyncio.sleep(1.5)  # the outage itself: lanes finish their calls meanwhile and hold the results
        await redis_server.start()
        document = await finished(client, batch_id, timeout=20)  # about 3 s of work is left
        order = [int(index) for index in await redis.lrange(finished_key, 0, -1)]
        async with client.stream("GET", f"/v1/batches/{batch_id}/results") as response:
            lines = [json.loads(line) async for line in response.aiter_lines()]

    assert document["counts"] == {
        "total": 200,
        "succeeded": 200,
        "failed": 0,
        "pending": 0,
        "running": 0,
        "skipped": 0,
        "input_required": 0,
        "cancelled": 0,
        "expired": 0,
        "unauthenticated": 0,
    }
    assert sorted(order) == list(range(200))  # each item finished exactly once
    assert sorted(item["index"] for item in lines) == list(range(200))
    assert {item["status"] for item in lines} == {"ok"}
    stats = await call_backend(fresh_backend.url, "stats")
    assert len(stats["arrivals"]) == sum(call is stamp for call in calls)  # and was called exactly once


@pytest.mark.serial  # its assertion is a duration
async def test_while_redis_is_down_the_api_answers_503_and_api_and_worker_recover_by_themselves(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    settings = settings_for(redis_server, tmp_path, {"demo": stdio_demo()})
    echo = {"server": "demo", "tool": "echo", "arguments": {"message": "hi"}}
    async with (
        running_service(settings) as service,
        httpx.AsyncClient(base_url=service.base_url, timeout=30) as client,
    ):
        service.worker.allow_pick_jobs = False  # the work goes to the worker process: its survival is the point
        with worker_processes(settings, 1, tmp_path) as (process,):
            before = await run_batch(client, [echo])
            batch = f"/v1/batches/{before['id']}"
            await redis_server.stop()
            outage_ends = time.monotonic() + 3

            requests = [("POST", "/v1/batches", {"calls": [echo]})]
            requests += [("GET", path, None) for path in (batch, f"{batch}?wait=5", f"{batch}/results")]
            requests += [("GET", f"{batch}/items/0", None)]
            for method, path, body in requests:
                response = await client.request(method, path, json=body)
                assert (response.status_code, response.json()) == (503, UNAVAILABLE), path
            assert (await client.get("/healthz")).status_code == 503

            await asyncio.sleep(outage_ends - time.monotonic())  # the rest of the outage
            assert process.poll() is None, "the worker process died with Redis"
            assert not service.worker.main_task.done()
            await redis_server.start()

            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get(batch)).json()["status"] == "completed"
            assert (await client.get(f"{batch}/results")).status_code == 200
            assert all(server["tools"] for server in (await client.get("/v1/servers")).json())
            after = await run_batch(client, [echo])
            assert after["ok"]
            assert after["results"][0]["worker"] == f"{socket.gethostname()}:{process.pid}"
    log = (tmp_path / "worker-0.log").read_text()
    assert "Traceback" not in log
    assert log.count("Redis is unreachable") == 1  # one warning for the outage, not one per retry
    assert "Redis is back" in log


async def test_a_stream_that_loses_redis_midway_is_cut_short_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(StorageUnavailable)

    @app.get("/lines")
    async def lines() -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b'{"seq": 1}\n'
            raise ConnectionError("Connection closed by server.")

        return StreamingResponse(body(), media_type="application/x-ndjson")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started, what="uvicorn started", timeout=20)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            with pytest.raises(httpx.RemoteProtocolError):  # an incomplete body, never one that looks whole
                async with client.stream("GET", "/lines") as response:
                    assert response.status_code == 200
                    await response.aread()
    finally:
        server.should_exit = True
        await task
    assert "Exception in ASGI application" not in caplog.text
    assert "cut short" in caplog.text


async def test_a_redis_call_is_retried_through_an_outage_and_a_loading_redis() -> None:
    failures: list[Exception] = [ConnectionError("refused"), ConnectionError("refused"), BusyLoadingError("LOADING")]

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "answered"

    assert await with_redis_retry(call, outage=10) == "answered"
    assert not failures


@pytest.mark.serial  # its assertion is a duration
async def test_a_redis_call_gives_up_once_the_outage_lasts_too_long() -> None:
    attempts = 0

    async def call() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("refused")

    start = time.monotonic()
    with pytest.raises(ConnectionError):
        await with_redis_retry(call, outage=0.5)
    assert 0.5 <= time.monotonic() - start < 1.5
    assert attempts > 2  # retried with backoff meanwhile
