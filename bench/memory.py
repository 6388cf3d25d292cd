"""What a 100,000-item batch costs in memory, and whether reading it stays fast while it runs.

    uv run python bench/memory.py [--calls 100000] [--concurrency 100] [--workers 2]

Runs one batch of `--calls` echo calls (each its own message) through the service (`service_stack`: a private
redis-server, the demo backend over HTTP, the API and `--workers` worker processes) and measures
  - the submit: the request body's size and the POST's time (body serialized beforehand: upload, validation,
    storing and queueing);
  - the API's and each worker's resident memory: VmRSS sampled about every 0.3 s against the batch's progress, and
    the peak (VmHWM) after the warm-up, after the submit and at the end (Linux /proc);
  - Redis `INFO memory`: used_memory before, after the submit and at the end, and used_memory_peak;
  - GET ?limit=100, GET ?offset=<calls/2>&limit=100 and GET (default page) over and over while the batch runs, and
    50 times each after it has completed: median, p95, max;
  - GET .../results streaming every item once, after completion, with the API's resident memory meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from overhead import Stack, service_stack  # the script's own folder is on sys.path
from redis.asyncio import Redis

MB = 1024 * 1024


def status_kb(pid: int, field_name: str) -> int:
    """A memory field (VmRSS, VmHWM) of /proc/<pid>/status, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise KeyError(field_name)


async def used_memory(redis: Redis) -> tuple[int, int]:
    info = await redis.info("memory")
    return int(info["used_memory"]), int(info["used_memory_peak"])


@dataclass
class Watch:
    """What is sampled while the batch runs."""

    processes: dict[str, int]  # name -> pid
    rss: list[tuple[float, dict[str, int]]] = field(default_factory=list)  # (progress, name -> VmRSS kB)
    hwm: dict[str, dict[str, int]] = field(default_factory=dict)  # moment -> name -> VmHWM kB
    redis: dict[str, int] = field(default_factory=dict)  # moment -> used_memory
    gets: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # '<when> <what>' -> seconds

    def sample(self, progress: float) -> None:
        self.rss.append((progress, {name: status_kb(pid, "VmRSS") for name, pid in self.processes.items()}))

    def peaks(self, moment: str) -> None:
        self.hwm[moment] = {name: status_kb(pid, "VmHWM") for name, pid in self.processes.items()}


async def timed_get(http: httpx.AsyncClient, url: str, params: dict[str, int]) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    response = await http.get(url, params=params)
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    document: dict[str, object] = response.json()
    return elapsed, document


def pages(calls: int) -> dict[str, dict[str, int]]:
    """The reads timed: the first 100 items, 100 from the middle, and the default page (what the budget holds)."""
    half = calls // 2
    return {"limit=100": {"limit": 100}, f"offset={half}&limit=100": {"offset": half, "limit": 100}, "default page": {}}


async def watch_batch(stack: Stack, watch: Watch, batch_id: str, calls: int) -> None:
    """Read the document over and over while the batch runs, sampling memory between reads."""
    http, url = stack.http, f"/v1/batches/{batch_id}"
    while True:
        for name, params in pages(calls).items():
            seconds, document = await timed_get(http, url, params)
            watch.gets[f"running {name}"].append(seconds)
        counts = document["counts"]
        assert isinstance(counts, dict)
        watch.sample((counts["succeeded"] + counts["failed"]) / calls)
        if document["status"] == "completed":
            return
        await asyncio.sleep(0.2)  # a client polling: a few reads a second, not a load test of the API


async def stream_results(stack: Stack, batch_id: str) -> tuple[float, int, int]:
    """Seconds to stream every finished item as JSON Lines, the lines, and the API's most VmRSS meanwhile (kB)."""
    most = status_kb(stack.api_pid, "VmRSS")
    lines = 0
    start = time.perf_counter()
    async with stack.http.stream("GET", f"/v1/batches/{batch_id}/results") as response:
        async for chunk in response.aiter_lines():
            lines += 1 if chunk else 0
            if lines % 2000 == 0:
                most = max(most, status_kb(stack.api_pid, "VmRSS"))
    return time.perf_counter() - start, lines, most


def stats(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = statistics.quantiles(ms, n=20)[18] if len(ms) >= 2 else ms[0]
    return f"{statistics.median(ms):7.1f} {p95:7.1f} {ms[-1]:7.1f}   ({len(ms)} requests)"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    env = {"MCP_BATCH_MAX_CALLS_PER_BATCH": str(args.calls)}
    calls = [{"server": "bench", "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(args.calls)]
    body = json.dumps({"calls": calls, "max_concurrency": args.concurrency}).encode()
    headers = {"content-type": "application/json"}
    async with service_stack(env, workers=args.workers) as stack:
        http = stack.http
        redis = Redis.from_url(stack.redis_url)
        names = {"api": stack.api_pid} | {f"worker {n + 1}": pid for n, pid in enumerate(stack.worker_pids)}
        watch = Watch(names)
        warm = {"calls": calls[: 100 * args.workers], "max_concurrency": args.concurrency}  # sharded: every session
        warm_id = (await http.post("/v1/batches", json=warm)).json()["id"]
        await http.get(f"/v1/batches/{warm_id}", params={"wait": 60, "limit": 1})
        watch.peaks("after warm-up")
        watch.redis["before"], _ = await used_memory(redis)
        watch.sample(0.0)

        began = time.perf_counter()
        response = await http.post("/v1/batches", content=body, headers=headers)
        submit = time.perf_counter() - began
        response.raise_for_status()
        batch_id = response.json()["id"]
        watch.peaks("after submit")
        watch.redis["after submit"], _ = await used_memory(redis)

        await watch_batch(stack, watch, batch_id, args.calls)
        elapsed = time.perf_counter() - began
        watch.peaks("at the end")
        watch.redis["at the end"], watch.redis["peak"] = await used_memory(redis)

        url = f"/v1/batches/{batch_id}"
        for _ in range(50):
            for name, params in pages(args.calls).items():
                watch.gets[f"completed {name}"].append((await timed_get(http, url, params))[0])
        streamed, lines, api_streaming = await stream_results(stack, batch_id)
        await redis.aclose()

    report(args, stack, watch, len(body), submit, elapsed, (streamed, lines, api_streaming))


def report(
    args: argparse.Namespace,
    stack: Stack,
    watch: Watch,
    body_bytes: int,
    submit: float,
    elapsed: float,
    streaming: tuple[float, int, int],
) -> None:
    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}; {stack.redis}")
    print(f"  the backend, the API, {args.workers} workers, Redis and this client share these cores; load average now")
    print(f"  {os.getloadavg()[0]:.2f}")
    print(f"one batch of {args.calls} echo calls, max_concurrency {args.concurrency}, {args.workers} worker processes")
    print(f"  POST body {body_bytes / MB:.1f} MB: answered in {submit:.2f} s")
    print(f"  submit -> completed: {elapsed:.1f} s ({args.calls / elapsed:.0f} items/s)")
    print("peak resident memory (VmHWM), MB")
    names = list(watch.processes)
    print("| moment | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for moment, peaks in watch.hwm.items():
        print(f"| {moment} | " + " | ".join(f"{peaks[n] / 1024:.0f}" for n in names) + " |")
    print("resident memory (VmRSS) against the batch's progress, MB")
    print("| finished | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for target in (0.0, 0.25, 0.5, 0.75, 1.0):
        progress, rss = min(watch.rss, key=lambda sample: abs(sample[0] - target))
        print(f"| {progress:.0%} | " + " | ".join(f"{rss[n] / 1024:.0f}" for n in names) + " |")
    first, last = watch.rss[0][1], watch.rss[-1][1]
    growth = ", ".join(f"{n} {(last[n] - first[n]) * 1024 / args.calls:.0f}" for n in names)
    print(f"  growth over the batch, bytes per item of the batch: {growth}")
    redis = watch.redis
    per_item = (redis["at the end"] - redis["before"]) / args.calls
    moments = ", ".join(f"{moment} {used / MB:.1f} MB" for moment, used in redis.items())
    print(f"Redis used_memory: {moments}; {per_item:.0f} bytes per item at the end")
    print("GET /v1/batches/{id}, ms:            median     p95     max")
    for name, values in watch.gets.items():
        print(f"  {name:<32} {stats(values)}")
    seconds, lines, api_kb = streaming
    print(f"GET .../results, every item: {lines} lines in {seconds:.2f} s", end="")
    print(f"; the API's VmRSS meanwhile at most {api_kb / 1024:.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
