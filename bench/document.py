"""How fast a large batch's document answers: one page, the default page, and every result as JSON Lines.

    uv run python bench/document.py [--calls 10000]

Runs a batch of `--calls` echo calls through the service (API and one worker as separate processes, a private
redis-server, the demo backend over HTTP), then times, median of 20 requests each: GET with ?limit=100, GET with
the default page (what a 300,000-byte budget holds), and GET .../results streaming every item.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from overhead import spawn  # the script's own folder is on sys.path

from service.dev import demo_http_backend, embedded_redis, free_port, wait_until


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
    with tempfile.TemporaryDirectory(prefix="mcp-batch-bench-") as tmp:
        async with embedded_redis(Path(tmp)) as (redis_url, redis_desc):
            port, api_port = free_port(), free_port()
            async with demo_http_backend(port):
                servers = Path(tmp) / "servers.json"
                servers.write_text(json.dumps({"mcpServers": {"bench": {"url": f"http://127.0.0.1:{port}/mcp"}}}))
                env = {**os.environ, "MCP_BATCH_REDIS_URL": redis_url, "MCP_BATCH_SERVERS": str(servers)}
                procs = [spawn("api", "--port", str(api_port), env=env), spawn("worker", env=env)]
                try:
                    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=300) as http:

                        async def healthy() -> bool:
                            return (await http.get("/healthz")).status_code == 200

                        await wait_until(healthy, 30, "api")
                        calls = [
                            {"server": "bench", "tool": "echo", "arguments": {"message": f"m{i}"}}
                            for i in range(args.calls)
                        ]
                        body = {"calls": calls, "max_concurrency": 32}
                        batch_id = (await http.post("/v1/batches", json=body)).json()["id"]
                        url = f"/v1/batches/{batch_id}"
                        while (await http.get(url, params={"wait": 60, "limit": 1})).json()["status"] != "completed":
                            pass
                        page = await timed(lambda: http.get(url, params={"offset": args.calls // 2, "limit": 100}))
                        default = await timed(lambda: http.get(url))
                        lines = await timed(lambda: http.get(f"{url}/results"), rounds=5)
                        count = len((await http.get(f"{url}/results")).text.splitlines())
                finally:
                    for proc in procs:
                        proc.terminate()
                    for proc in procs:
                        proc.wait(10)
    print(f"machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}; {redis_desc}")
    print(f"a completed batch of {args.calls} items, median response times:")
    print(f"  GET ?offset={args.calls // 2}&limit=100     : {page * 1000:8.1f} ms")
    print(f"  GET (default page, 292 items) : {default * 1000:8.1f} ms")
    print(f"  GET /results (all {count} lines) : {lines * 1000:8.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
