"""The wait for replicas before a write: a primary and a replica of the test's own (real processes on loopback), the
guard meeting and missing its count, and a worker that fails a write it could not make safe, without sending it."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.errors import ReplicaWaitFailed
from mcp_batch.ops import durability, replication
from mcp_batch.ops.replication import WriteGuard
from mcp_batch.settings import Settings
from mcp_batch_cli.status import as_text, gather
from tests.redis_server import RedisServer
from tests.sentinel_set import QUICK_SYNC
from tests.support import (
    HttpBackendProcess,
    by_id,
    call_backend,
    counted_servers,  # noqa: F401 - the `servers` fixture of this module
    eventually,
    run_batch,
    running_api,
    running_worker,
)

pytestmark = pytest.mark.timeout(60)

PROBE = "mcpb:durability:probe"


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    """A primary and one replica of it (two redis-servers start in a fraction of a second): clients to each."""
    primary, replica = await _pair_servers(tmp_path)
    clients = aioredis.Redis.from_url(primary.url), aioredis.Redis.from_url(replica.url)
    try:
        await eventually(lambda: _linked(clients[0]), what="the replica online", timeout=20)
        yield clients
    finally:
        for client in clients:
            await client.aclose()
        for server in (replica, primary):
            await server.stop(signal.SIGKILL)


async def _pair_servers(tmp_path: Path) -> tuple[RedisServer, RedisServer]:
    primary = RedisServer(tmp_path / "primary", QUICK_SYNC)
    await primary.start()
    replica = RedisServer(tmp_path / "replica", [*QUICK_SYNC, "--replicaof", "127.0.0.1", str(primary.port)])
    await replica.start()
    return primary, replica


async def _linked(primary: aioredis.Redis) -> bool:
    return (await replication.read(primary)).replicas == 1


async def test_the_primary_reports_its_replica(pair: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    primary, replica = pair
    assert (await replication.read(primary)).as_dict() == {"role": "master", "replicas": 1}
    assert (await replication.read(replica)).role == "slave"


async def test_a_write_waits_until_every_replica_seen_has_its_claim(
    pair: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    primary, replica = pair
    guard = WriteGuard(disk=False, count=None, timeout=2.0)
    await primary.set("claim", "held")
    await guard(primary, PROBE)
    assert await guard.wanted(primary) == 1
    assert await replica.get("claim") == b"held"  # on the replica once the wait returned


async def test_a_count_the_replicas_cannot_meet_fails_the_wait(pair: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    primary, _ = pair
    with pytest.raises(ReplicaWaitFailed) as failed:
        await WriteGuard(disk=False, count=2, timeout=0.5)(primary, PROBE)
    assert failed.value.wanted == 2 and failed.value.acked in (0, 1)  # 0 when the one replica is slow to answer
    assert f"{failed.value.acked} of 2 replicas confirmed it" in str(failed.value) and "not sent" in str(failed.value)


async def test_no_replicas_and_no_count_means_no_wait(redis: aioredis.Redis) -> None:
    guard = WriteGuard(disk=False, count=None, timeout=2.0)
    await guard(redis, PROBE)
    assert await guard.wanted(redis) == 0 and not await redis.exists(PROBE)  # nothing was even written


async def test_a_redis_failing_mid_wait_fails_the_wait(own_redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(own_redis.url)
    await own_redis.stop(signal.SIGKILL)
    try:
        with pytest.raises(ReplicaWaitFailed) as failed:
            await WriteGuard(disk=True, count=1, timeout=0.1)(client, PROBE)
    finally:
        await client.aclose()
    assert failed.value.acked is None and "Redis failed during the wait" in str(failed.value)


async def test_a_write_whose_claim_reached_no_replica_is_not_sent_and_ends_retryable(
    settings: Settings, fresh_backend: HttpBackendProcess
) -> None:
    settings = settings.model_copy(update={"replica_wait_count": 1, "replica_wait_seconds": 0.1})  # none exist
    calls = [
        {"id": "write", "server": "counted", "tool": "tally_write", "arguments": {"key": "write"}},
        {"id": "read", "server": "counted", "tool": "tally", "arguments": {"key": "read"}},
    ]
    async with (
        running_worker(settings),
        running_api(settings) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        items = by_id(await run_batch(http, calls, read_only=False))
    tallies = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert items["read"]["status"] == "ok" and tallies == {"read": 1}  # a read never waits
    write = items["write"]
    assert write["status"] == "error" and write["error"]["code"] == "replica_wait_failed"
    assert write["error"]["type"] == "storage" and write["error"]["details"]["replicas_confirmed"] == 0


async def test_the_promise_says_whether_a_failover_may_repeat_a_write(
    pair: tuple[aioredis.Redis, aioredis.Redis], settings: Settings
) -> None:
    primary, _ = pair
    waiting = await durability.read(primary, settings)
    unguarded = await durability.read(primary, settings.model_copy(update={"replica_wait_seconds": 0}))
    counted = await durability.read(primary, settings.model_copy(update={"replica_wait_count": 1}))
    assert (waiting.replicas, waiting.replica_wait, waiting.writes_may_repeat_after_failover) == (
        1,
        "every replica seen",
        False,
    )
    assert (unguarded.replica_wait, unguarded.writes_may_repeat_after_failover) == ("off", True)
    assert counted.as_dict()["replica_wait"] == "1 replicas"


async def test_readyz_status_and_the_start_up_log_say_which_promise_holds(
    tmp_path: Path, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    primary, replica = await _pair_servers(tmp_path)
    unguarded = settings.model_copy(update={"redis_url": primary.url, "replica_wait_seconds": 0})
    try:
        client = aioredis.Redis.from_url(primary.url)
        await eventually(lambda: _linked(client), what="the replica online", timeout=20)
        await client.aclose()
        async with (
            running_worker(unguarded),
            running_api(unguarded) as base_url,
            httpx.AsyncClient(base_url=base_url) as http,
        ):
            ready = (await http.get("/readyz")).json()["durability"]
        text = as_text(await gather(unguarded))
    finally:
        await replica.stop(signal.SIGKILL)
        await primary.stop(signal.SIGKILL)
    assert (ready["replicas"], ready["replica_wait"], ready["writes_may_repeat_after_failover"]) == (1, "off", True)
    assert "replicas   1 online, claims of writes wait for: off: writes may repeat after a failover" in text
    warned = [
        r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "a failover may lose" in r.getMessage()
    ]
    assert sorted(m.split(":")[0] for m in warned) == ["api", "worker"]
