"""Real resources for the tests: a Redis database emptied before each test, the demo backend as real processes
over stdio and streamable HTTP, and the service itself (uvicorn on a real port, an arq worker in the loop)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import HttpBackendProcess, ServiceHandle, running_service, start_http_backend, stdio_demo

REDIS_URL = os.environ.get("MCP_BATCH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    """The test database, emptied before each test."""
    client = aioredis.Redis.from_url(REDIS_URL)
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def http_backend() -> Iterator[HttpBackendProcess]:
    """The demo backend over streamable HTTP, one process for the session."""
    backend = start_http_backend()
    yield backend
    backend.stop()


@pytest.fixture
def fresh_backend() -> Iterator[HttpBackendProcess]:
    """A demo HTTP backend of this test's own: its tallies (stats) count only this test's calls."""
    backend = start_http_backend()
    yield backend
    backend.stop()


@pytest.fixture
def servers(tmp_path: Path, http_backend: HttpBackendProcess) -> dict[str, Any]:
    """The servers a test's service uses; a test may add to it before starting the service."""
    return {
        "demo": stdio_demo(),
        "demo_http": {"url": http_backend.url},
        "quick": stdio_demo(timeout_seconds=1),
    }


@pytest.fixture
def settings(tmp_path: Path, servers: dict[str, Any], redis: aioredis.Redis) -> Settings:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    # worker_metrics_port=0: a test that reads a worker's metrics gives it a free port of its own; warm_sessions off:
    # a test's worker opens the sessions its calls need, not one per configured backend (a test turns it on)
    return Settings(
        redis_url=REDIS_URL,
        servers=path,
        worker_idle_poll_seconds=30,
        auth="none",
        worker_metrics_port=0,
        warm_sessions=False,
    )


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[ServiceHandle]:
    """API + one worker against the test Redis."""
    async with running_service(settings) as handle:
        yield handle


@pytest.fixture
async def client(service: ServiceHandle) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=service.base_url, timeout=90) as http:
        yield http
