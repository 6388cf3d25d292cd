"""What the service costs over calling the backend directly, measured side by side in one run.

    uv run python bench/overhead.py [--calls 2000] [--concurrency 16] [--rounds 3] [--tracing]

Starts a private redis-server, the demo backend over streamable HTTP, and the service as separate processes
(`mcp-batch api`, `mcp-batch worker`), as in production. Each round sends the same echo calls
  - directly, with the SDK Client at concurrency C, and
  - as one batch through the service with max_concurrency C (submit, then ?wait until completed),
and then times small 5-call batches via ?wait against the same 5 calls made directly.
Prints medians over the rounds and the ratio service/direct. Timings vary on shared machines: quote the ratios.

With --tracing it measures what traces cost instead: two such stacks, one with no OTEL_* variables (tracing off) and
one whose API and worker export every span over OTLP/HTTP to a no-op collector in this process (tracing on), the same
batch through each in interleaved rounds, and prints both throughputs and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from mcp import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from mcp_batch.keys import Keys
from mcp_batch_cli.dev import demo_http_backend, embedded_redis, free_port, wait_until


def spawn(command: str, *args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`mcp-batch COMMAND` as a separate process, as in production."""
    argv = [sys.executable, "-c", "from mcp_batch_cli.commands import main; main()", command, *args]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


@dataclass
class Stack:
    """A private Redis, the demo backend over HTTP, and the service as processes: what every benchmark runs on."""

    http: httpx.AsyncClient
    backend_url: str
    redis: str  # a description, for the printout
    redis_url: str
    api_pid: int
    worker_pids: list[int]


@asynccontextmanager
async def service_stack(extra_env: dict[str, str] | None = None, workers: int = 1) -> AsyncIterator[Stack]:
    """Start everything (the API and `workers` worker processes), wait until the API answers and every worker
    beats, so a batch is sharded across all of them; stop everything on exit."""
    with tempfile.TemporaryDirectory(prefix="mcp-batch-bench-") as tmp:
        async with embedded_redis(Path(tmp)) as (redis_url, redis_desc):
            backend_port, api_port = free_port(), free_port()
            async with demo_http_backend(backend_port):
                url = f"http://127.0.0.1:{backend_port}/mcp"
                servers = Path(tmp) / "servers.json"
                servers.write_text(json.dumps({"mcpServers": {"bench": {"url": url}}}))
                env = {**os.environ, "MCP_BATCH_REDIS_URL": redis_url, "MCP_BATCH_SERVERS": str(servers)}
                env["MCP_BATCH_AUTH"] = "none"  # a private stack on localhost: no keys to manage
                env.update(extra_env or {})
                api = spawn("api", "--port", str(api_port), env=env)
                procs = [api] + [spawn("worker", env=env) for _ in range(workers)]
                redis = aioredis.Redis.from_url(redis_url)
                beats = Keys(env.get("MCP_BATCH_KEY_PREFIX", "mcpb")).workers
                try:
                    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=300) as http:

                        async def healthy() -> bool:
                            return (await http.get("/healthz")).status_code == 200

                        async def all_beating() -> bool:
                            return int(await redis.zcard(beats)) == workers

                        await wait_until(healthy, 30, "api")
                        await wait_until(all_beating, 60, "workers")
                        yield Stack(http, url, redis_desc, redis_url, api.pid, [p.pid for p in procs[1:]])
                finally:
                    await redis.aclose()
                    for proc in procs:
                        proc.terminate()
                    for proc in procs:
                        proc.wait(10)


def echo_arguments(i: int) -> dict[str, Any]:
    return {"message": f"m{i}"}


async def direct(
    url: str,
    calls: int,
    concurrency: int,
    tool: str = "echo",
    arguments: Callable[[int], dict[str, Any]] = echo_arguments,
) -> float:
    """Seconds to make `calls` calls of `tool` (echo by default) with one SDK client at `concurrency`."""
    async with Client(url) as client:
        await client.call_tool("echo", {"message": "warm-up"})
        todo = iter(range(calls))

        async def lane() -> None:
            for i in todo:
                result = await client.call_tool(tool, arguments(i))
                assert not result.is_error

        start = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        return time.perf_counter() - start


async def run_batch(
    http: httpx.AsyncClient, calls: list[dict[str, Any]], concurrency: int
) -> tuple[float, dict[str, Any]]:
    """Seconds from POST to a completed document for one batch of these calls, and that document (one result)."""
    start = time.perf_counter()
    response = await http.post("/v1/batches", json={"calls": calls, "max_concurrency": concurrency})
    response.raise_for_status()
    batch_id = response.json()["id"]
    while True:
        document: dict[str, Any] = (await http.get(f"/v1/batches/{batch_id}", params={"wait": 60, "limit": 1})).json()
        if document["status"] == "completed":
            elapsed = time.perf_counter() - start
            assert document["counts"]["succeeded"] == len(calls), document["counts"]
            return elapsed, document


async def through_service(http: httpx.AsyncClient, calls: int, concurrency: int) -> float:
    """Seconds from POST to a completed document for one batch of `calls` echo calls."""
    body = [{"server": "bench", "tool": "echo", "arguments": echo_arguments(i)} for i in range(calls)]
    elapsed, _ = await run_batch(http, body, concurrency)
    return elapsed


class NoOpCollector:
    """Accepts OTLP/HTTP exports on a loopback port and drops them, counting requests, bytes and spans."""

    def __init__(self) -> None:
        self.requests = self.bytes = self.spans = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                request = ExportTraceServiceRequest.FromString(self.rfile.read(size))
                spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
                collector.requests, collector.bytes = collector.requests + 1, collector.bytes + size
                collector.spans += spans
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def env(self) -> dict[str, str]:
        """What turns tracing on in a service process, sending its spans here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.server.server_address[1]}"}


async def tracing_cost(args: argparse.Namespace, ceiling: dict[str, str]) -> None:
    """Throughput of one batch through a stack with tracing off and one with tracing on, in interleaved rounds."""
    collector = NoOpCollector()
    async with service_stack(ceiling) as off, service_stack({**ceiling, **collector.env}) as on:
        for stack in (off, on):
            await through_service(stack.http, 5, 5)  # warm-up: opens the worker's backend session
        runs: dict[str, list[float]] = {"off": [], "on": []}
        for n in range(args.rounds):  # interleaved, and each side first in every other round
            order = [("off", off), ("on", on)] if n % 2 == 0 else [("on", on), ("off", off)]
            for name, stack in order:
                runs[name].append(await through_service(stack.http, args.calls, args.concurrency))
    collector.server.shutdown()  # the stacks have stopped: their span processors flushed at shut-down
    off_s, on_s = statistics.median(runs["off"]), statistics.median(runs["on"])
    print(f"{args.calls} echo calls at concurrency {args.concurrency}, median of {args.rounds} interleaved rounds")
    print(f"  tracing off : {off_s:7.3f} s  {args.calls / off_s:8.0f} calls/s   rounds: {_rounds(runs['off'])}")
    print(f"  tracing on  : {on_s:7.3f} s  {args.calls / on_s:8.0f} calls/s   rounds: {_rounds(runs['on'])}")
    print(f"  ratio on/off throughput: {off_s / on_s:.2f}")
    per_item = collector.spans / (args.calls * args.rounds)
    sent = f"{collector.requests} OTLP requests, {collector.bytes / 1e6:.1f} MB"
    print(f"  exported: {collector.spans} spans ({per_item:.1f} per item) in {sent}")


def _rounds(seconds: list[float]) -> str:
    return " ".join(f"{s:.2f}" for s in seconds)


async def median_of(rounds: int, measure: Callable[[], Awaitable[float]]) -> float:
    return statistics.median([await measure() for _ in range(rounds)])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small-rounds", type=int, default=20)
    parser.add_argument("--tracing", action="store_true", help="measure tracing off against tracing on instead")
    args = parser.parse_args()

    ceiling = {"MCP_BATCH_MAX_CONCURRENCY_CEILING": str(max(256, args.concurrency))}
    if args.tracing:
        await tracing_cost(args, ceiling)
        return
    async with service_stack(ceiling) as stack:
        http, url, redis_desc = stack.http, stack.backend_url, stack.redis
        await through_service(http, 5, 5)  # warm-up: opens the worker's backend session
        d_runs, s_runs = [], []
        for _ in range(args.rounds):  # interleaved, so drift on the machine hits both alike
            d_runs.append(await direct(url, args.calls, args.concurrency))
            s_runs.append(await through_service(http, args.calls, args.concurrency))
        d, s = statistics.median(d_runs), statistics.median(s_runs)

        async def five_direct() -> float:
            async with Client(url) as client:
                start = time.perf_counter()
                await asyncio.gather(*(client.call_tool("echo", {"message": "x"}) for _ in range(5)))
                return time.perf_counter() - start

        small_s = await median_of(args.small_rounds, lambda: through_service(http, 5, 5))
        small_d = await median_of(args.small_rounds, five_direct)

    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}; redis: {redis_desc}")
    print(f"{args.calls} echo calls at concurrency {args.concurrency}, median of {args.rounds} interleaved rounds")
    print(f"  direct SDK client : {d:7.3f} s  {args.calls / d:8.0f} calls/s")
    print(f"  through service   : {s:7.3f} s  {args.calls / s:8.0f} calls/s")
    print(f"  ratio service/direct throughput: {d / s:.2f}")
    print(f"5-call batch, median of {args.small_rounds}")
    print(f"  submit -> completed via ?wait : {small_s * 1000:7.1f} ms")
    print(f"  same 5 calls made directly     : {small_d * 1000:7.1f} ms  (session already open: no connect time)")
    print(f"  added latency                  : {(small_s - small_d) * 1000:7.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
