"""What a write item pays to keep its claim through a failover or a host crash, and how long a Sentinel failover
leaves the service without a primary.

    uv run python bench/replication.py [--items 2000] [--failovers 3]

A worker sends a call that may write only once its claim is on the replicas (WAIT) and, under `appendfsync
everysec` where the server has it, on the disk (WAITAOF): one extra round trip per write item (mcp_batch/ops/
replication.py's WriteGuard). Each row writes `--items` claims (an HSET, as a claim is) one after the other and
times the guard after each, against real servers on loopback:
  - none:    Redis 7.0 alone, no wait (the guard returns at once: nothing to wait for);
  - WAIT 1:  Redis 7.0 primary + one replica, the guard waits for every replica seen;
  - WAITAOF: Valkey 8.1 alone, appendonly yes, appendfsync everysec (Redis 7.0 has no WAITAOF);
  - both:    Valkey 8.1 primary (appendfsync everysec) + one replica, WAIT 1 and WAITAOF in one round trip.
Then `--failovers` times: a Sentinel set (a primary, a replica, three sentinels; down-after 1 s) on Redis 7.0, the
primary killed with SIGKILL, and the time until a write through the Sentinel URL succeeds again (what the API
answers 503 through). Prints median and p99 side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the tests' server helpers start the real processes

from mcp_batch.ops import replication  # noqa: E402
from mcp_batch.ops.replication import WriteGuard  # noqa: E402
from mcp_batch.store import sentinel  # noqa: E402
from mcp_batch_cli.dev import wait_until  # noqa: E402
from tests.redis_server import Engine, RedisServer  # noqa: E402
from tests.sentinel_set import SentinelSet  # noqa: E402

EVERYSEC = ["--appendonly", "yes", "--appendfsync", "everysec"]
PROBE = "mcpb:durability:probe"


async def servers(base: Path, engine: Engine, options: list[str], replica: bool) -> list[RedisServer]:
    primary = RedisServer(base / "primary", [*options, "--repl-diskless-sync-delay", "0"], engine=engine)
    await primary.start()
    started = [primary]
    if replica:
        follower = RedisServer(base / "replica", ["--replicaof", "127.0.0.1", str(primary.port)], engine=engine)
        await follower.start()
        started.append(follower)
        client = aioredis.Redis.from_url(primary.url)

        async def online() -> bool:
            return (await replication.read(client)).replicas == 1

        await wait_until(online, 20, "the replica online")
        await client.aclose()
    return started


async def guard_times(url: str, disk: bool, items: int) -> tuple[list[float], list[float]]:
    """Per item: the claim's write alone, and the guard after it (seconds)."""
    client = aioredis.Redis.from_url(url)
    guard = WriteGuard(disk=disk, count=None, timeout=2.0)
    await guard.wanted(client, fresh=True)
    writes, waits = [], []
    try:
        for i in range(items):
            start = time.perf_counter()
            await client.hset("bench:claims", str(i), "claimed")
            written = time.perf_counter()
            await guard(client, PROBE)
            writes.append(written - start)
            waits.append(time.perf_counter() - written)
    finally:
        await client.aclose()
    return writes, waits


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


async def failover_seconds(base: Path) -> float:
    """From the primary's SIGKILL until a write through the Sentinel URL succeeds again."""
    found = SentinelSet(base)
    await found.start()
    client = sentinel.client(found.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        await client.set("bench:alive", 1)
        await found.primary.stop(signal.SIGKILL)
        killed = time.perf_counter()
        while True:
            try:
                await client.set("bench:alive", 2)
                return time.perf_counter() - killed
            except (aioredis.RedisError, OSError):
                await asyncio.sleep(0.02)  # a sampling period
    finally:
        await client.aclose()
        await found.stop()


async def main(items: int, failovers: int) -> None:
    rows: list[tuple[str, Engine, list[str], bool, bool]] = [
        ("none (Redis 7.0 alone)", "redis", ["--appendonly", "no"], False, False),
        ("WAIT 1 (Redis 7.0 + replica)", "redis", ["--appendonly", "no"], True, False),
        ("WAITAOF (Valkey 8.1 everysec)", "valkey", EVERYSEC, False, True),
        ("WAIT 1 + WAITAOF (Valkey 8.1)", "valkey", EVERYSEC, True, True),
    ]
    print(f"{platform.node()}: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{'guard':32} {'claim write ms':>22} {'extra per write item ms':>26}")
    print(f"{'':32} {'median':>10} {'p99':>11} {'median':>12} {'p99':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, engine, options, replica, disk) in enumerate(rows):
            started = await servers(Path(tmp) / str(n), engine, options, replica)
            try:
                writes, waits = await guard_times(started[0].url, disk, items)
            finally:
                for server in reversed(started):
                    await server.stop(signal.SIGKILL)
            print(
                f"{name:32} {statistics.median(writes) * 1e3:10.3f} {p99(writes) * 1e3:11.3f} "
                f"{statistics.median(waits) * 1e3:12.3f} {p99(waits) * 1e3:13.3f}"
            )
        windows = [await failover_seconds(Path(tmp) / f"sentinel{i}") for i in range(failovers)]
    shown = ", ".join(f"{w:.2f}" for w in windows)
    print(f"Sentinel failover (down-after 1 s): no primary for {statistics.median(windows):.2f} s median ({shown})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--failovers", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.items, args.failovers))
