"""Redis's persistence, read at start-up by the API and each worker: one warning when writes may run again after a
crash of Redis's host, the mode in /readyz and `mcp-batch status`, and a Redis that refuses CONFIG tolerated. Each
test runs redis-servers of its own, configured as operators do."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.errors import ReplicaWaitFailed
from mcp_batch.ops import durability
from mcp_batch.ops.durability import Durability
from mcp_batch.ops.replication import WriteGuard
from mcp_batch.settings import Settings
from mcp_batch_cli.status import as_json, as_text, gather
from tests.redis_server import RedisServer
from tests.support import running_api, running_worker

pytestmark = pytest.mark.timeout(60)

CONFIGS = {
    "off": ["--appendonly", "no"],
    "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
    "always": ["--appendonly", "yes", "--appendfsync", "always"],
    "no-config": ["--appendonly", "yes", "--rename-command", "CONFIG", ""],  # as managed Redis services do
}


@pytest.fixture
async def redises(tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """One redis-server (Redis 7.0: no WAITAOF, which these tests are about) per configuration, each on its own port
    and directory: name -> URL."""
    started = [RedisServer(tmp_path / name, options, engine="redis") for name, options in CONFIGS.items()]
    await asyncio.gather(*(server.start() for server in started))
    yield {name: server.url for name, server in zip(CONFIGS, started, strict=True)}
    for server in started:
        await server.stop(signal.SIGKILL)


async def read(url: str) -> Durability:
    client = aioredis.Redis.from_url(url)
    try:
        return await durability.read(client)
    finally:
        await client.aclose()


async def test_each_persistence_mode_is_read_and_judged(redises: dict[str, str]) -> None:
    found = {name: await read(url) for name, url in redises.items()}
    assert [(d.mode, d.writes_may_repeat) for d in found.values()] == [
        ("no append-only file", True),
        ("append-only, appendfsync everysec", True),
        ("append-only, appendfsync always", False),
        ("unknown (Redis refused CONFIG GET)", True),
    ]
    assert not any(d.waitaof for d in found.values())  # Redis 7.0 here: no WAITAOF


async def test_valkey_has_waitaof_so_a_worker_waits_for_each_writes_claim_on_disk(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "valkey", CONFIGS["everysec"], engine="valkey")
    await server.start()
    try:
        found = await read(server.url)
        client = aioredis.Redis.from_url(server.url)
        try:
            await WriteGuard(disk=True, count=0, timeout=1.0)(client, "mcpb:durability:probe")
        finally:
            await client.aclose()
    finally:
        await server.stop(signal.SIGKILL)
    assert found.waitaof and found.waits_for_disk and not found.writes_may_repeat


def test_waitaof_closes_the_gap_of_everysec_where_the_server_has_it() -> None:
    assert Durability("yes", "everysec", waitaof=True).waits_for_disk
    assert not Durability("yes", "everysec", waitaof=True).writes_may_repeat
    assert not Durability("yes", "always", waitaof=True).waits_for_disk  # every write is on disk already
    assert not Durability("no", "everysec", waitaof=True).waits_for_disk  # no file to wait for


def warnings_of(caplog: pytest.LogCaptureFixture, process: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == durability.__name__ and r.getMessage().startswith(process)
    ]


async def test_a_worker_says_once_at_start_that_writes_may_repeat_and_that_waitaof_is_missing(
    redises: dict[str, str], settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=durability.__name__)
    async with running_worker(settings.model_copy(update={"redis_url": redises["everysec"]})) as worker:
        assert not worker.ctx["state"].pool.write_wait.guard.disk  # no WAITAOF on this server: no wait for the disk
    [warning, replicas, waitaof] = warnings_of(caplog, "worker")
    assert "appendfsync everysec" in warning and "non-idempotent calls run again" in warning
    assert "appendfsync always" in warning and "docs/operations.md, Redis durability" in warning
    assert "has no WAITAOF" in waitaof and "0 replicas online; claims of writes wait for every replica seen" in replicas
    assert [r.levelname for r in caplog.records if r.name == durability.__name__] == ["WARNING", "INFO", "INFO"]


async def test_no_warning_with_appendfsync_always(
    redises: dict[str, str], settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=durability.__name__)
    async with running_worker(settings.model_copy(update={"redis_url": redises["always"]})):
        pass
    assert not [r for r in caplog.records if r.name == durability.__name__ and r.levelno >= logging.WARNING]


async def test_the_api_warns_at_start_and_readyz_shows_the_mode(
    redises: dict[str, str], settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=durability.__name__)
    async with running_api(settings.model_copy(update={"redis_url": redises["off"]})) as base_url:
        assert any("no append-only file" in m for m in warnings_of(caplog, "api"))
        async with httpx.AsyncClient(base_url=base_url) as http:
            ready = (await http.get("/readyz")).json()  # no worker: 503, the mode shown all the same
    assert ready["durability"] == {
        "mode": "no append-only file",
        "appendonly": "no",
        "appendfsync": "everysec",
        "waitaof": False,
        "writes_may_repeat_after_host_crash": True,
        "replicas": 0,
        "replica_wait": "every replica seen",
        "writes_may_repeat_after_failover": False,  # no replica to fail over to
    }


async def test_a_redis_that_refuses_config_is_tolerated_everywhere(
    redises: dict[str, str], settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    refusing = settings.model_copy(update={"redis_url": redises["no-config"]})
    async with (
        running_worker(refusing),
        running_api(refusing) as base_url,
        httpx.AsyncClient(base_url=base_url) as http,
    ):
        ready = (await http.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["durability"]["mode"] == "unknown (Redis refused CONFIG GET)"
    assert len([m for m in warnings_of(caplog, "api") + warnings_of(caplog, "worker") if "unknown" in m]) == 2


async def test_status_shows_the_durability_mode(redises: dict[str, str], settings: Settings) -> None:
    status = await gather(settings.model_copy(update={"redis_url": redises["always"]}))
    assert as_json(status)["durability"]["mode"] == "append-only, appendfsync always"
    assert "durability append-only, appendfsync always: no write repeats" in as_text(status)


async def test_a_write_whose_claim_cannot_be_awaited_on_disk_is_not_sent(redises: dict[str, str]) -> None:
    client = aioredis.Redis.from_url(redises["everysec"])  # Redis 7.0: WAITAOF is an unknown command
    try:
        with pytest.raises(ReplicaWaitFailed):
            await WriteGuard(disk=True, count=0, timeout=1.0)(client, "mcpb:durability:probe")
    finally:
        await client.aclose()
