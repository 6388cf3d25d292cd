"""A submit's cost while its tenant keeps many batches alive: before and after.

    uv run python bench/living.py [--levels 0 50000 200000] [--submits 20] [--ref GITREF ...]

For each tree (this checkout, and each --ref checked out into a temporary worktree with `uv sync --frozen`):
`mcp-batch api` of that tree (auth off, so every batch is the tenant `default`'s; no worker, so every batch stays
alive and unfinished) on a private redis-server. At each level the tenant's living batches are brought up to that
many, seeded by the tree's own store (`Store.submits.create` in the tree's interpreter, 500 at a time: the layout
a submit writes, without HTTP), then `--submits` one-call batches are POSTed one after another and measured:

  - submit latency (POST to 202, ms): median and slowest;
  - the submit's script (EVALSHA: the stored-bytes reservation, or the one admission script): its mean time from
    INFO commandstats, and its median and slowest in Redis's SLOWLOG (threshold 20 µs, under which a script's inner
    commands stay), in ms: what every other client of that Redis waits behind;
  - the slowest PING another connection sent every 5 ms meanwhile (ms): that wait, as another client sees it.

Bounded in time: the seeding dominates (about a minute per 100,000 batches on two busy cores). The machine is shared:
quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import AsyncExitStack, suppress
from typing import Any

from harness import (  # the script's own folder is on sys.path
    Row,
    Stack,
    Tree,
    checkout,
    current_tree,
    load,
    machine,
    service_stack,
    side_by_side,
)

CALL = {"server": "demo", "tool": "echo", "arguments": {"message": "m"}}

# Run by the tree's own interpreter: its store writes the batches (whatever its layout).
SEED = """
import asyncio, sys
import redis.asyncio as aioredis
from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from mcp_batch.store import Store

async def main(url: str, count: int) -> None:
    redis = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(url, max_connections=64))
    store = Store(redis, Keys(), 86_400)
    call = {"server": "demo", "tool": "echo", "arguments": {"message": "m"}}
    request = BatchRequest.model_validate({"calls": [call]})
    for start in range(0, count, 500):
        await asyncio.gather(*(store.submits.create(request, 1) for _ in range(min(500, count - start))))
    await redis.aclose()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


SLOWLOG_MICROS = 20


async def evalsha_stats(redis: Any) -> tuple[int, int]:
    """EVALSHA calls so far and their microseconds (INFO commandstats: a script's time, its inner commands in it)."""
    row = (await redis.info("commandstats")).get("cmdstat_evalsha", {})
    return int(row.get("calls", 0)), int(row.get("usec", 0))


def seed(tree: Tree, redis_url: str, count: int) -> float:
    """Add `count` living batches through the tree's store; seconds taken."""
    if count <= 0:
        return 0.0
    started = time.perf_counter()
    python = str(tree.path / ".venv" / "bin" / "python")
    subprocess.run([python, "-c", SEED, redis_url, str(count)], cwd=tree.path, check=True)
    return time.perf_counter() - started


async def measure(stack: Stack, submits: int) -> dict[str, float]:
    """`submits` one-call POSTs in turn, with the script's SLOWLOG time and another client's PING meanwhile."""
    redis = stack.redis
    # Redis logs a script's inner commands too: a threshold they stay under (an EXISTS takes a microsecond or two),
    # which every submit's script passes (tens of microseconds at the least)
    await redis.config_set("slowlog-log-slower-than", SLOWLOG_MICROS)
    await redis.config_set("slowlog-max-len", 10_000)
    await redis.slowlog_reset()
    before = await evalsha_stats(redis)
    pings: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        other = type(redis).from_url(stack.redis_url)  # a connection of its own: another client
        try:
            while not stop.is_set():
                started = time.perf_counter()
                await other.ping()
                pings.append(time.perf_counter() - started)
                await asyncio.sleep(0.005)
        finally:
            await other.aclose()

    prober = asyncio.create_task(probe())
    latencies = []
    try:
        for _ in range(submits):
            started = time.perf_counter()
            response = await stack.http.post("/v1/batches", json={"calls": [CALL]})
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
    finally:
        stop.set()
        with suppress(asyncio.CancelledError):
            await prober
    calls, micros = (after - first for after, first in zip(await evalsha_stats(redis), before, strict=True))
    entries = sorted(await redis.slowlog_get(10_000), key=lambda e: e["id"])
    scripts = [e["duration"] / 1000 for e in entries if e["command"].split()[:1] in ([b"EVALSHA"], ["EVALSHA"])]
    await redis.config_set("slowlog-log-slower-than", 10_000)
    if len(scripts) != submits or calls != submits:
        print(f"{stack.tree.label}: {len(scripts)} scripts in SLOWLOG, {calls} EVALSHA for {submits}", file=sys.stderr)
    return {
        "script_mean": micros / calls / 1000 if calls else 0.0,
        "submit_p50": statistics.median(latencies) * 1000,
        "submit_max": max(latencies) * 1000,
        "script_p50": statistics.median(scripts) if scripts else 0.0,
        "script_max": max(scripts) if scripts else 0.0,
        "ping_max": max(pings) * 1000 if pings else 0.0,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[0, 50_000, 200_000])
    parser.add_argument("--submits", type=int, default=20)
    parser.add_argument("--ref", action="extend", nargs="+", default=[], help="git refs to compare (the before)")
    args = parser.parse_args()
    began, load_before = time.perf_counter(), load()
    servers = {"mcpServers": {"demo": {"command": "mcp-batch", "args": ["demo-backend"]}}}  # never started
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    seeding: dict[str, float] = defaultdict(float)
    async with AsyncExitStack() as running:
        trees: list[Tree] = [await running.enter_async_context(checkout(ref)) for ref in args.ref]
        trees.append(current_tree())
        for tree in trees:
            async with service_stack(tree, servers, 0) as stack:
                alive = 0
                for level in sorted(args.levels):
                    seeding[tree.label] += await asyncio.to_thread(seed, tree, stack.redis_url, level - alive)
                    alive = level
                    for name, value in (await measure(stack, args.submits)).items():
                        figures[tree.label][f"{level}.{name}"].append(value)
                    alive += args.submits
                    print(f"{tree.label}: {level:,} living batches measured", file=sys.stderr)
    labels = [tree.label for tree in trees]
    print(f"\n{machine()}; load average {load_before} before, {load()} after; {time.perf_counter() - began:.0f} s")
    print("seeding: " + ", ".join(f"{label} {seconds:.0f} s" for label, seconds in seeding.items()))
    print(f"{args.submits} one-call submits at each level, one after another\n")
    rows: list[Row] = []
    for level in sorted(args.levels):
        rows += [
            (f"{level:,} living: submit, median ms", f"{level}.submit_p50", "{:.1f}"),
            (f"{level:,} living: submit, slowest ms", f"{level}.submit_max", "{:.1f}"),
            (f"{level:,} living: script, mean ms (commandstats)", f"{level}.script_mean", "{:.3f}"),
            (f"{level:,} living: script (SLOWLOG), median ms", f"{level}.script_p50", "{:.3f}"),
            (f"{level:,} living: script (SLOWLOG), slowest ms", f"{level}.script_max", "{:.3f}"),
            (f"{level:,} living: another client's PING, slowest ms", f"{level}.ping_max", "{:.1f}"),
        ]
    side_by_side(labels, rows, figures)


if __name__ == "__main__":
    asyncio.run(main())
