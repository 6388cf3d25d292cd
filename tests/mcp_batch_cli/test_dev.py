"""`mcp-batch dev`'s embedded Redis: a redis-server from the PATH, else the Redis the environment names."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch_cli import dev
from tests.conftest import REDIS_URL
from tests.support import run_batch, running_service, stdio_demo

pytestmark = pytest.mark.timeout(60)


async def test_dev_starts_a_private_redis_server(tmp_path: Path) -> None:
    async with dev.embedded_redis(tmp_path) as (url, description):
        assert "redis-server" in description
        client = aioredis.Redis.from_url(url)
        assert await client.ping()
        await client.aclose()


async def test_without_a_redis_server_dev_says_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev.shutil, "which", lambda _: None)
    monkeypatch.delenv("MCP_BATCH_REDIS_URL", raising=False)
    with pytest.raises(ConfigError, match="apt-get install redis-server"):
        async with dev.embedded_redis(tmp_path):
            pass


async def test_without_a_redis_server_dev_uses_the_redis_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dev.shutil, "which", lambda _: None)
    monkeypatch.setenv("MCP_BATCH_REDIS_URL", REDIS_URL)
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"demo": stdio_demo()}}))
    async with dev.embedded_redis(tmp_path) as (url, description):
        assert url == REDIS_URL and "MCP_BATCH_REDIS_URL" in description
        settings = Settings(redis_url=url, servers=servers, worker_idle_poll_seconds=30, auth="none")
        async with (
            running_service(settings) as service,
            httpx.AsyncClient(base_url=service.base_url, timeout=60) as client,
        ):
            document = await run_batch(client, [{"server": "demo", "tool": "echo", "arguments": {"message": "x"}}])
    assert document["ok"] is True
