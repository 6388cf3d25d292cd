"""`mcp-batch dev`'s embedded Redis: a redis-server from the PATH, or fakeredis where there is none."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from mcp_batch_cli import dev
from tests.support import run_batch, running_service, stdio_demo

pytestmark = pytest.mark.timeout(60)


async def test_dev_starts_a_private_redis_server(tmp_path: Path) -> None:
    async with dev.embedded_redis(tmp_path) as (url, description):
        assert "redis-server" in description
        client = aioredis.Redis.from_url(url)
        assert await client.ping()
        await client.aclose()


async def test_dev_falls_back_to_fakeredis_and_a_batch_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dev.shutil, "which", lambda _: None)
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"demo": stdio_demo()}}))
    async with dev.embedded_redis(tmp_path) as (url, description):
        assert "fakeredis" in description
        settings = Settings(redis_url=url, servers=servers, worker_idle_poll_seconds=30, auth="none")
        async with (
            running_service(settings) as service,
            httpx.AsyncClient(base_url=service.base_url, timeout=60) as client,
        ):
            document = await run_batch(client, [{"server": "demo", "tool": "echo", "arguments": {"message": "x"}}])
    assert document["ok"] is True
