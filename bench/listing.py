"""`GET /v1/batches` over one tenant's 100,000 batches: unfiltered, filtered by metadata, and a scan, side by side.

    uv run python bench/listing.py [--batches 100000] [--every 100] [--requests 200]

`mcp-batch api` of this checkout (auth off, so every batch is the tenant `default`'s; no worker, so nothing runs) on
a private redis-server. The tenant's batches are written straight through the store (`Store.submits.create`, 500 at
a time: the layout a submit writes, without HTTP), one call each, with metadata: `job=nightly` on every `--every`-th
(1,000 of 100,000 by default), `job=hourly` on the rest, and `team=a` on every third. Then these pages of 50,
`--requests` of each, interleaved request by request so drift hits them alike, in ms (median and p99):

  - unfiltered: the tenant's newest 50;
  - `metadata.job=nightly`: the newest 50 of the 1 in 100, read from that pair's index;
  - `metadata.job=nightly&metadata.team=a`: two pairs, the smaller index read (1,000 entries), each batch checked
    for the other (a third of them have it: about 150 read for a page of 50);
  - `metadata.job=nightly`, a page 10 pages deep (by its cursor);
  - `status=completed` (no batch is): what a filter without an index costs, a scan of 1,000 entries per page.

The machine is shared: quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import redis.asyncio as aioredis
from harness import current_tree, load, machine, service_stack  # the script's own folder is on sys.path

from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from mcp_batch.store import Store

CALL = {"server": "demo", "tool": "echo", "arguments": {"message": "m"}}


async def seed(url: str, count: int, every: int) -> float:
    """`count` batches of the tenant `default`, tagged; seconds taken."""
    started = time.perf_counter()
    redis = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(url, max_connections=64))
    store = Store(redis, Keys(), 86_400)

    def request(n: int) -> BatchRequest:
        metadata = {"job": "nightly" if n % every == 0 else "hourly"} | ({"team": "a"} if n % 3 == 0 else {})
        return BatchRequest.model_validate({"calls": [CALL], "metadata": metadata})

    for start in range(0, count, 500):
        await asyncio.gather(*(store.submits.create(request(n), 1) for n in range(start, min(count, start + 500))))
    await redis.aclose()
    return time.perf_counter() - started


def p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=100, help="one batch in this many is job=nightly")
    parser.add_argument("--requests", type=int, default=200, help="requests of each kind")
    args = parser.parse_args()
    servers = {"mcpServers": {"demo": {"command": "mcp-batch", "args": ["demo-backend"]}}}  # never started
    async with service_stack(current_tree(), servers, 0) as stack:
        seconds = await seed(stack.redis_url, args.batches, args.every)
        http = stack.http
        nightly = {"metadata.job": "nightly", "limit": 50}
        cursor: Any = None
        for _ in range(10):  # the cursor of the 11th page of the filtered list
            page = (await http.get("/v1/batches", params={**nightly, **({"cursor": cursor} if cursor else {})})).json()
            cursor = page["next_cursor"] or cursor
        kinds: dict[str, dict[str, Any]] = {
            "unfiltered": {"limit": 50},
            "metadata.job=nightly": nightly,
            "metadata.job=nightly & metadata.team=a": {**nightly, "metadata.team": "a"},
            **({"metadata.job=nightly, page 11 (cursor)": {**nightly, "cursor": cursor}} if cursor else {}),
            "status=completed (a scan, no index)": {"status": "completed", "limit": 50},
        }
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        found: dict[str, int] = {}
        for _ in range(args.requests):
            for kind, params in kinds.items():
                started = time.perf_counter()
                response = await http.get("/v1/batches", params=params)
                times[kind].append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                found[kind] = len(response.json()["batches"])
    print(f"machine: {machine()}; load average {load()}")
    print(f"{args.batches:,} batches of one tenant, seeded in {seconds:.0f} s; {args.requests} requests of each")
    base = statistics.median(times["unfiltered"])
    print("| GET /v1/batches (pages of 50) | batches | median ms | p99 ms | median / unfiltered |")
    print("|---|---|---|---|---|")
    for kind, values in times.items():
        median = statistics.median(values)
        print(f"| {kind} | {found[kind]} | {median:.2f} | {p99(values):.2f} | {median / base:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
