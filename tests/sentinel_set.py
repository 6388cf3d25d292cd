"""A Sentinel-managed Redis of a test's own: a primary, a replica and three sentinels, real processes on loopback
ports, of either engine (tests/redis_server.py). The sentinels judge the primary down after `DOWN_AFTER_MS` without
an answer and promote the replica, so a failover takes a few seconds, not the default half minute."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.models import TERMINAL_BATCH
from mcp_batch.ops import replication
from tests.ports import free_port
from tests.redis_server import ANY_ENGINE, ENGINES, Engine, RedisServer, binaries
from tests.support import eventually

SERVICE = "mcpbatch"
# A replica's first sync starts at once (by default a diskless sync waits 5 s for more replicas to join)
QUICK_SYNC = ["--appendonly", "no", "--repl-diskless-sync-delay", "0"]
DOWN_AFTER_MS = 1_000
FAILOVER_TIMEOUT_MS = 4_000


async def _online(primary: aioredis.Redis) -> bool:
    return (await replication.read(primary)).replicas == 1


class SentinelProcess:
    """One sentinel (`<server> sentinel.conf --sentinel`): it rewrites its config file as it learns, so each has its
    own directory."""

    def __init__(self, directory: Path, engine: Engine, primary_port: int) -> None:
        directory.mkdir(parents=True)
        self.directory, self.port, self.executable = directory, free_port(), binaries(engine).server
        (directory / "sentinel.conf").write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {directory}\nlogfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            self.executable,
            str(self.directory / "sentinel.conf"),
            "--sentinel",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
        )

    async def stop(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.send_signal(signal.SIGKILL)
            await self._process.wait()


class SentinelSet:
    """The primary, its replica and three sentinels; `url` is the service's Sentinel URL."""

    def __init__(self, directory: Path, engine: Engine = ANY_ENGINE) -> None:
        self.engine = engine
        self.primary = RedisServer(directory / "primary", QUICK_SYNC, engine=engine)
        replica_of = [*QUICK_SYNC, "--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica = RedisServer(directory / "replica", replica_of, engine=engine)
        self.sentinels = [SentinelProcess(directory / f"sentinel{i}", engine, self.primary.port) for i in range(3)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    async def start(self) -> None:
        """Start everything; return once the replica is online (synced) and every sentinel sees it and the other
        two."""
        await self.primary.start()
        await self.replica.start()
        primary = aioredis.Redis.from_url(self.primary.url)
        try:
            await eventually(lambda: _online(primary), what="the replica synced", timeout=30)
        finally:
            await primary.aclose()
        for sentinel in self.sentinels:
            await sentinel.start()
        await eventually(self._settled, what="three sentinels watching a primary with its replica", timeout=30)

    async def _settled(self) -> bool:
        for sentinel in self.sentinels:
            client = aioredis.Redis(port=sentinel.port, decode_responses=True)
            try:
                master = await client.execute_command("SENTINEL", "MASTER", SERVICE)  # type: ignore[no-untyped-call]
                fields = dict(zip(master[::2], master[1::2], strict=True)) if isinstance(master, list) else master
                if int(fields["num-slaves"]) < 1 or int(fields["num-other-sentinels"]) < 2:
                    return False
            except (OSError, aioredis.RedisError):
                return False
            finally:
                await client.aclose()
        return True

    async def primary_ports(self) -> set[int]:
        """The ports of the nodes the sentinels call the primary now, each sentinel's word (one port: they agree)."""
        ports = set()
        for sentinel in self.sentinels:
            client = aioredis.Redis(port=sentinel.port, decode_responses=True)
            try:
                _, port = await client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)  # type: ignore[no-untyped-call]
            finally:
                await client.aclose()
            ports.add(int(port))
        return ports

    async def primary_port(self) -> int:
        """The port of the node the sentinels call the primary now."""
        client = aioredis.Redis(port=self.sentinels[0].port, decode_responses=True)
        try:
            _, port = await client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)  # type: ignore[no-untyped-call]
        finally:
            await client.aclose()
        return int(port)

    async def cut_replica(self) -> None:
        """Cut the replica off the primary's stream from now on, keeping it eligible for promotion: it drops its link
        and cannot make another (it authenticates with a password the primary does not have), while the sentinels
        still see it, recently linked. Writes acknowledged from here on are what a failover loses. Returns once the
        replica reports its link down."""
        client = aioredis.Redis(port=self.replica.port, decode_responses=True)
        try:
            await client.config_set("masterauth", "not-the-primary-password")
            await client.client_kill_filter(_type="master")

            async def down() -> bool:
                return (await client.info("replication"))["master_link_status"] == "down"

            await eventually(down, what="the replica's link to its primary down", timeout=10)
        finally:
            await client.aclose()

    async def stop(self) -> None:
        for sentinel in self.sentinels:
            await sentinel.stop()
        for server in (self.replica, self.primary):
            await server.stop(signal.SIGKILL)


async def ended_through_the_failover(http: httpx.AsyncClient, batch_id: str) -> dict[str, Any]:
    """The batch's document once it is terminal; a 503 (no primary known yet) is waited out like a running batch."""

    async def terminal() -> dict[str, Any] | None:
        try:
            response = await http.get(f"/v1/batches/{batch_id}", params={"wait": 10})
        except httpx.TransportError:  # a kept-alive connection the API closed while the test waited on the failover
            return None
        if response.status_code == 503:
            return None
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        return document if document["status"] in TERMINAL_BATCH else None

    return await eventually(terminal, what=f"batch {batch_id} ended", timeout=90, interval=0.05)


@pytest.fixture(name="sentinels", params=ENGINES)
async def started_sentinels(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SentinelSet]:
    """A started SentinelSet on each engine, stopped after the test."""
    engine: Engine = request.param
    found = SentinelSet(tmp_path / engine, engine)
    await found.start()
    yield found
    await found.stop()
