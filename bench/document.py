"""How fast a large batch's document answers: one page, the default page, and every result as JSON Lines.

    uv run python bench/document.py [--calls 10000]

Runs a batch of `--calls` echo calls through the service (API and one worker as separate processes, a private
redis-server, the demo backend over HTTP), then times, median of 20 requests each: GET with ?limit=100, GET with
the default page (what a 300,000-byte budget holds), and GET .../results streaming every item.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
from overhead import service_stack  # the script's own folder is on sys.path


async def timed(request: Callable[[], Awaitable[httpx.Response]], rounds: int = 20) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        response = await request()
        response.raise_for_status()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=10_000)
    args = parser.parse_args()
    async with service_stack() as stack:
        http = stack.http
        calls = [{"server": "bench", "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(args.calls)]
        batch_id = (await http.post("/v1/batches", json={"calls": calls, "max_concurrency": 32})).json()["id"]
        url = f"/v1/batches/{batch_id}"
        while (await http.get(url, params={"wait": 60, "limit": 1})).json()["status"] != "completed":
            pass
        page = await timed(lambda: http.get(url, params={"offset": args.calls // 2, "limit": 100}))
        default = await timed(lambda: http.get(url))
        lines = await timed(lambda: http.get(f"{url}/results"), rounds=5)
        count = len((await http.get(f"{url}/results")).text.splitlines())
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; {stack.redis}")
    print(f"a completed batch of {args.calls} items, median response times:")
    print(f"  GET ?offset={args.calls // 2}&limit=100     : {page * 1000:8.1f} ms")
    print(f"  GET (default page, 292 items) : {default * 1000:8.1f} ms")
    print(f"  GET /results (all {count} lines) : {lines * 1000:8.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
