"""The floor under a small batch: what the least design with the service's parts (an HTTP API on uvicorn, Redis, a
worker process holding an open MCP session) adds to the same calls made directly, against the service itself.

    uv run python bench/floor.py [--rounds 30] [--sizes 1 5] [--ref PATH-OR-GITREF ...]

Each round, for each size, the same echo calls (bench/cost.py's backend, over stdio) are made:
  - direct: one SDK `Client`, its session open, all at once;
  - http: a POST with the calls to a bare endpoint of the floor's API that answers `{}` at once (uvicorn's and the
    HTTP client's part alone);
  - floor: one POST to the floor's API (a Starlette app on uvicorn, as the service's): it pushes the calls to a Redis
    list (LPUSH) and waits on one shared subscription; the floor's worker (uvloop, as the service's) takes them
    (BLPOP), makes them on its open SDK session all at once and publishes the results; the API answers with them.
    Nothing is checked, stored, leased or counted: every item once, limits, backpressure, the document and its
    records are what the service adds on top;
  - each tree (this checkout and each --ref, as in bench/latency.py): one `POST /v1/batches?wait` of the calls.
The order of the sides rotates from round to round. Medians (and p90) over the rounds, each side's time over the
direct calls', and the CPU per batch of the floor's API and worker and of each tree's API and worker (/proc, over
all rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from cost import SERVER, echo_calls, fast_backend, warm_up  # the script's own folder is on sys.path
from harness import (
    Stack,
    cpu_seconds,
    current_tree,
    free_port,
    load,
    machine,
    redis_server,
    service_stack,
    wait_until,
)
from latency import direct_calls, direct_client, open_tree, timed_batch

_JOBS, _DONE = "floor:jobs", "floor:done"


def _api(port: int, redis_url: str) -> None:
    """The floor's API: POST /run pushes the calls and answers with their results; POST /nothing answers at once."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    redis = aioredis.Redis.from_url(redis_url)
    waiting: dict[str, asyncio.Future[bytes]] = {}

    async def listen() -> None:
        pubsub = redis.pubsub()
        await pubsub.subscribe(_DONE)
        async for message in pubsub.listen():
            if message["type"] == "message":
                job_id, _, results = message["data"].partition(b" ")
                found = waiting.pop(job_id.decode(), None)
                if found is not None and not found.done():
                    found.set_result(results)

    async def run(request: Request) -> Response:
        body = json.loads(await request.body())
        job_id = uuid.uuid4().hex
        waiting[job_id] = asyncio.get_running_loop().create_future()
        await redis.lpush(_JOBS, json.dumps({"id": job_id, "calls": body["calls"]}))
        results = await waiting[job_id]
        return Response(b'{"results":' + results + b"}", media_type="application/json")

    async def nothing(request: Request) -> Response:
        await request.body()
        return JSONResponse({})

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        listening = asyncio.create_task(listen())
        yield
        listening.cancel()

    routes = [Route("/run", run, methods=["POST"]), Route("/nothing", nothing, methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


async def _worker(redis_url: str) -> None:
    """The floor's worker: each job's calls on one open SDK session, all at once; the results published."""
    redis = aioredis.Redis.from_url(redis_url)
    async with direct_client(fast_backend()) as client:

        async def one(job: dict[str, Any]) -> None:
            results = await asyncio.gather(*(client.call_tool(c["tool"], c["arguments"]) for c in job["calls"]))
            dumped = [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in results]
            await redis.publish(_DONE, f"{job['id']} {json.dumps(dumped)}")

        running: set[asyncio.Task[None]] = set()
        await redis.set("floor:ready", 1)
        while True:
            _, raw = await redis.blpop([_JOBS])
            task = asyncio.create_task(one(json.loads(raw)))
            running.add(task)
            task.add_done_callback(running.discard)


async def _timed(http: httpx.AsyncClient, path: str, calls: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    response = await http.post(path, json={"calls": calls})
    response.raise_for_status()
    if path == "/run" and len(response.json()["results"]) != len(calls):
        raise RuntimeError("the floor lost a call")
    return (time.perf_counter() - start) * 1000


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--ref", action="extend", nargs="+", default=[], help="checkouts (paths) or git refs")
    args = parser.parse_args()
    began, load_before = time.perf_counter(), load()
    backend = fast_backend()
    servers = {"mcpServers": {SERVER: {"command": backend.command, "args": backend.args}}}
    samples: dict[str, list[float]] = defaultdict(list)
    async with AsyncExitStack() as running:
        workdir = Path(running.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-floor-")))
        redis_url, _ = await running.enter_async_context(redis_server(workdir))
        port = free_port()
        me = [sys.executable, __file__]
        floor_api = subprocess.Popen([*me, "api", str(port), redis_url])  # noqa: ASYNC220 - start-up
        floor_worker = subprocess.Popen([*me, "worker", "0", redis_url])  # noqa: ASYNC220 - start-up
        for proc in (floor_api, floor_worker):
            running.callback(proc.wait, 10)
            running.callback(proc.terminate)
        redis = aioredis.Redis.from_url(redis_url)
        running.push_async_callback(redis.aclose)
        http = await running.enter_async_context(httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60))

        async def floor_ready() -> bool:
            return bool(await redis.get("floor:ready")) and (await http.post("/nothing", json={})).status_code == 200

        await wait_until(floor_ready, 60, "the floor's API and worker")
        trees = [await open_tree(running, ref) for ref in args.ref] + [current_tree()]
        stacks: dict[str, Stack] = {}
        for tree in trees:
            stacks[tree.label] = await running.enter_async_context(service_stack(tree, servers, 1))
            await warm_up(stacks[tree.label], 8)
        client = await running.enter_async_context(direct_client(backend))

        async def direct(calls: list[dict[str, Any]]) -> float:
            return await direct_calls(client, len(calls), len(calls))

        async def via_tree(stack: Stack, calls: list[dict[str, Any]]) -> float:
            return (await timed_batch(stack, calls, len(calls), held=True))["total"]

        sides: list[tuple[str, Any]] = [
            ("direct", direct),
            ("http", lambda calls: _timed(http, "/nothing", calls)),
            ("floor", lambda calls: _timed(http, "/run", calls)),
        ]
        sides += [(label, lambda calls, stack=stack: via_tree(stack, calls)) for label, stack in stacks.items()]
        for _ in range(3):  # warm every side before the clock counts
            for _, side in sides:
                await side(echo_calls(max(args.sizes)))
        pids = {"floor": (floor_api.pid, floor_worker.pid)}
        pids |= {label: (stack.api_pid, stack.worker_pids[0]) for label, stack in stacks.items()}
        cpu_before = {label: tuple(map(cpu_seconds, pair)) for label, pair in pids.items()}
        for round_ in range(args.rounds):
            shift = round_ % len(sides)
            for name, side in sides[shift:] + sides[:shift]:  # drift on the machine hits every side alike
                for size in args.sizes:
                    samples[f"{name}.{size}"].append(await side(echo_calls(size)))
        cpu_after = {label: tuple(map(cpu_seconds, pair)) for label, pair in pids.items()}
    print(f"\n{machine()}")
    print(f"load average (1, 5, 15 min) at start {load_before}, at end {load()}; {time.perf_counter() - began:.0f} s")
    print(f"{args.rounds} rounds; echo over stdio; the sides' order rotating; medians (p90) ms\n")
    names = [name for name, _ in sides]
    print(
        "| side | "
        + " | ".join(f"{size} call(s)" for size in args.sizes)
        + " | "
        + " | ".join(f"{size} call(s) - direct" for size in args.sizes)
        + " |"
    )
    print("|---" * (1 + 2 * len(args.sizes)) + "|")
    for name in names:
        cells = [
            f"{statistics.median(samples[f'{name}.{s}']):.2f} ({_p90(samples[f'{name}.{s}']):.2f})" for s in args.sizes
        ]
        extra = [
            f"{statistics.median(samples[f'{name}.{s}']) - statistics.median(samples[f'direct.{s}']):+.2f}"
            for s in args.sizes
        ]
        print(f"| {name} | " + " | ".join(cells + extra) + " |")
    batches = args.rounds * len(args.sizes)
    print("\nCPU per batch, all sizes (ms): | side | API | worker |")
    for label in pids:
        api, worker = (
            (after - before) / batches * 1000 for before, after in zip(cpu_before[label], cpu_after[label], strict=True)
        )
        print(f"| {label} | {api:.2f} | {worker:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "api":
        _api(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "worker":
        import uvloop

        uvloop.run(_worker(sys.argv[3]))
    else:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        asyncio.run(main())
