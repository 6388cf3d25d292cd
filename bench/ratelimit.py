"""Backend limits across worker processes, measured at the backend: the Redis limiter against per-process ones.

    uv run python bench/ratelimit.py [--calls 1000] [--workers 2 4]

For each limiter (`redis`: this service's; `local`: the same GCRA and a lease count kept per process, i.e. what a
per-process limiter does) and each number of worker processes, against a fresh backend (tests/fault_backend.py,
the demo's tools and `stamp`) that stamps the arrival time of every call and counts the calls in flight:
  - rate: limit 50/s, burst 10; `--calls` calls. Prints the most calls admitted in any 1 s and any 100 ms window
    (allowed: 60 and 15), completion against the ideal (calls - 10) / 50 s, and Redis round trips of the limiter
    per admitted call (from INFO commandstats: EVALSHA calls less the store's own steps, one HMGET each);
  - concurrency: max_concurrency 4, 100 ms calls, `--calls` / 2.5 calls. Prints the most calls in flight at the
    backend (allowed: 4) and the throughput against the ideal 40 calls/s.
Each run is one batch, sharded across every worker process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from mcp import Client

from mcp_batch_cli.dev import demo_http_backend, embedded_redis, free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent  # tests.fault_backend is imported from the checkout
RATE = {"per_second": 50, "burst": 10}
CAP = 4


def spawn(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", "from mcp_batch_cli.commands import main; main()", *command.split()]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def most_in_window(times: list[float], window: float) -> int:
    times, best, j = sorted(times), 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + window:
            j += 1
        best = max(best, j - i)
    return best


async def backend_stats(url: str) -> dict[str, Any]:
    async with Client(url) as client:
        stats: dict[str, Any] = (await client.call_tool("stats", {"reset": True})).structured_content or {}
        return stats


async def limiter_calls(redis: aioredis.Redis) -> int:
    """EVALSHA calls less the store's own finish-and-claim steps (each begins with one HMGET, as only a few other
    reads of a running batch do)."""
    stats = await redis.info("commandstats")
    calls = {name: int(row.get("calls", 0)) for name, row in stats.items()}
    return calls.get("cmdstat_evalsha", 0) - calls.get("cmdstat_hmget", 0)


async def scenario(
    redis_url: str, workdir: Path, limiter: str, workers: int, calls: int, kind: str
) -> dict[str, float]:
    port, api_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    limits: dict[str, Any] = {"rate_limit": RATE} if kind == "rate" else {"max_concurrency": CAP}
    servers = workdir / f"servers-{kind}.json"
    servers.write_text(json.dumps({"mcpServers": {"limited": {"url": url, **limits}}}))
    env = {
        **os.environ,
        "MCP_BATCH_REDIS_URL": redis_url,
        "MCP_BATCH_SERVERS": str(servers),
        "MCP_BATCH_LIMITER": limiter,
        "MCP_BATCH_AUTH": "none",
    }
    seconds = 0.0 if kind == "rate" else 0.1
    concurrency = 16
    redis = aioredis.Redis.from_url(redis_url)
    await redis.flushdb()
    async with demo_http_backend(port, "tests.fault_backend", ROOT):  # the demo's tools plus `stamp`, `stats`
        procs = [spawn(f"api --port {api_port}", env)] + [spawn("worker", env) for _ in range(workers)]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=120) as http:

                async def healthy() -> bool:
                    return (await http.get("/healthz")).status_code == 200

                async def workers_ready() -> bool:  # each worker subscribes to the release channel at start-up
                    ((_, subscribers),) = await redis.pubsub_numsub("mcpb:events:released")
                    return int(subscribers) == workers

                await wait_until(healthy, 30, "api")
                await wait_until(workers_ready, 60, "workers")
                # a warm-up batch sharded like the real one, so every worker has its backend session open
                warm_call = {"server": "limited", "tool": "sleep", "arguments": {"seconds": 0.2}}
                warm = {"calls": [warm_call] * 50 * workers, "max_concurrency": 4 * workers}
                await http.get(f"/v1/batches/{(await http.post('/v1/batches', json=warm)).json()['id']}?wait=60")
                await backend_stats(url)  # reset the backend's tallies
                before = await limiter_calls(redis)
                start = time.perf_counter()
                body = {
                    "calls": [{"server": "limited", "tool": "stamp", "arguments": {"seconds": seconds}}] * calls,
                    "max_concurrency": concurrency,
                }
                batch_id = (await http.post("/v1/batches", json=body)).json()["id"]
                while (await http.get(f"/v1/batches/{batch_id}?wait=60&limit=1")).json()["status"] != "completed":
                    pass
                results = (await http.get(f"/v1/batches/{batch_id}/results")).text.splitlines()
                used = {json.loads(line)["worker"] for line in results}
                elapsed = time.perf_counter() - start
                after = await limiter_calls(redis)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)
        stats = await backend_stats(url)
    await redis.aclose()
    admitted = len(stats["arrivals"])
    return {
        "admitted": admitted,
        "max_1s": most_in_window(stats["arrivals"], 1.0),
        "max_100ms": most_in_window(stats["arrivals"], 0.1),
        "elapsed": elapsed,
        "round_trips": (after - before) / admitted if limiter == "redis" else 0.0,
        "in_flight_max": stats["in_flight_max"],
        "workers_used": len(used),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    ideal_rate = (args.calls - RATE["burst"]) / RATE["per_second"]
    cap_calls = int(args.calls / 2.5)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mcp-batch-bench-") as tmp:
        async with embedded_redis(Path(tmp)) as (redis_url, redis_desc):
            for workers in args.workers:
                for limiter in ("redis", "local"):
                    rate = await scenario(redis_url, Path(tmp), limiter, workers, args.calls, "rate")
                    cap = await scenario(redis_url, Path(tmp), limiter, workers, cap_calls, "concurrency")
                    rows.append((limiter, workers, rate, cap))
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; {redis_desc}")
    print(f"rate: 50/s burst 10, {args.calls} calls (ideal {ideal_rate:.1f} s); concurrency: cap 4, 100 ms calls,")
    print(f"{cap_calls} calls (ideal 40 calls/s). Allowed: <= 60 per 1 s, <= 15 per 100 ms, <= 4 in flight.")
    header = ("limiter", "workers", "max/1s", "max/100ms", "time/ideal", "RTT/call", "in flight", "calls/s vs 40")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for limiter, workers, rate, cap in rows:
        throughput = cap["admitted"] / cap["elapsed"]
        cells = [
            "Redis (GCRA + leases)" if limiter == "redis" else "per-process, in memory",
            f"{workers} ({int(rate['workers_used'])} ran items)",
            str(rate["max_1s"]),
            str(rate["max_100ms"]),
            f"{rate['elapsed'] / ideal_rate:.3f}",
            f"{rate['round_trips']:.2f}" if limiter == "redis" else "0 (no Redis)",
            str(cap["in_flight_max"]),
            f"{throughput:.1f} ({throughput / 40:.2f})",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    asyncio.run(main())
