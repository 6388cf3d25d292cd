"""How the service scales over worker processes: I/O-bound calls against the ideal, no-op calls against raw arq.

    uv run python bench/scale.py [--rounds 3] [--sleep-calls 2000] [--noop-calls 20000] [--concurrency 200]

Two stacks (`service_stack`: a private redis-server, the demo backend over HTTP, the API), one with 1 worker process
and one with 2, are started side by side; each round measures on the first, then on the second (the idle one only
polls), so drift on the machine hits both alike:
  A. I/O-bound: one batch of `sleep` calls (50 ms each) at max_concurrency C, submit -> completed, against the ideal
     calls x 50 ms / C; and, as the backend's own ceiling, the same calls made directly with one SDK client at C;
  B. no-op: one batch of `echo` calls with an empty message at max_concurrency C: items per second from the batch's
     created_at to its finished_at; then raw arq in the same Redis: as many no-op jobs (`noop`, in a separate queue,
     written as `enqueue_job` writes them) run by as many burst-mode arq `Worker` processes, `max_jobs` C / processes
     each (the same total in flight), `poll_delay` 0 and uvloop like `mcp-batch worker`, timed from a start signal
     to the last job done. The ratio is mcp-batch items/s / arq jobs/s. Alongside: the direct echo rate of one SDK
     client at C (the backend's ceiling), and CPU per item: the workers' (/proc), Redis's (INFO cpu), the arq
     workers', and the direct SDK client's own per call (this process, on uvloop like the workers).
Medians and ranges over the rounds are printed. Everything (backend, API, workers, Redis, this client) shares the
machine's cores: quote the ratios, not seconds.
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
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import uvloop
from arq import ArqRedis, create_pool, func
from arq.connections import RedisSettings
from arq.constants import expires_extra_ms, job_key_prefix
from arq.jobs import serialize_job
from arq.worker import Worker
from overhead import Stack, direct, run_batch, service_stack  # the script's own folder is on sys.path

from mcp_batch_cli.dev import wait_until

SLEEP = 0.05
ARQ_QUEUE = "bench:arq:noop"  # not the service's queue: the service's workers never see these jobs
ARQ_READY, ARQ_GO = "bench:arq:ready", "bench:arq:go"


async def noop(ctx: dict[str, Any]) -> None:
    """The raw arq job: nothing."""


def calls_of(tool: str, count: int, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"server": "bench", "tool": tool, "arguments": arguments}] * count


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def redis_cpu(redis: ArqRedis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass
class Run:
    """One measured run: items (or jobs) per second, and the CPU seconds its workers and Redis spent on it."""

    per_second: float
    worker_cpu: float
    redis_cpu: float


async def arq_worker_process(redis_url: str, max_jobs: int) -> None:
    """One burst-mode arq worker (a child process): report ready, wait for the start signal, run every queued job,
    print when it finished, its CPU time and how many jobs it ran."""

    async def startup(ctx: dict[str, Any]) -> None:
        await ctx["redis"].incr(ARQ_READY)
        await ctx["redis"].blpop([ARQ_GO], 60)
        ctx["cpu"] = time.process_time()

    worker = Worker(
        functions=[func(noop, name="noop")],
        queue_name=ARQ_QUEUE,
        redis_settings=RedisSettings.from_dsn(redis_url),
        burst=True,
        max_jobs=max_jobs,
        poll_delay=0,
        keep_result=0,
        on_startup=startup,
        handle_signals=False,
    )
    try:
        await worker.async_run()  # on_startup returns at the start signal
        end, cpu = time.time(), time.process_time()
        ran = {"jobs": worker.jobs_complete, "failed": worker.jobs_failed}
        print(json.dumps({"end": end, "cpu": cpu - worker.ctx["cpu"], **ran}))
    finally:
        await worker.close()


async def raw_arq(redis_url: str, jobs: int, processes: int, concurrency: int) -> Run:
    """No-op arq jobs per second on `processes` burst-mode workers (the jobs are queued before the clock starts)."""
    pool = await create_pool(RedisSettings.from_dsn(redis_url))
    try:
        await pool.delete(ARQ_READY, ARQ_GO)
        now = int(time.time() * 1000)
        async with pool.pipeline(transaction=False) as pipe:  # what enqueue_job writes, without its WATCH per job
            for _ in range(jobs):
                job_id = uuid.uuid4().hex
                pipe.psetex(job_key_prefix + job_id, expires_extra_ms, serialize_job("noop", (), {}, None, now))
                pipe.zadd(ARQ_QUEUE, {job_id: now})
            await pipe.execute()
        argv = [sys.executable, __file__, "--arq-worker", redis_url, str(concurrency // processes)]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE) for _ in range(processes)]  # noqa: ASYNC220

        async def all_ready() -> bool:  # the children import arq and connect
            ready: bytes | None = await pool.get(ARQ_READY)
            return int(ready or 0) == processes

        await wait_until(all_ready, 60, "arq workers")
        go, redis_before = time.time(), await redis_cpu(pool)
        await cast(Awaitable[int], pool.rpush(ARQ_GO, *["go"] * processes))
        outputs = [json.loads((await asyncio.to_thread(proc.communicate, None, 600))[0]) for proc in procs]
        redis_used = await redis_cpu(pool) - redis_before
        done = sum(out["jobs"] for out in outputs)
        assert done == jobs and not any(out["failed"] for out in outputs), outputs
        elapsed = max(out["end"] for out in outputs) - go
        return Run(jobs / elapsed, sum(out["cpu"] for out in outputs), redis_used)
    finally:
        await pool.aclose()


async def direct_with_cpu(
    url: str, calls: int, concurrency: int, arguments: dict[str, Any], tool: str
) -> tuple[float, float]:
    """Seconds for `calls` direct calls with one SDK client at `concurrency`, and this process's CPU seconds."""
    cpu = time.process_time()
    seconds = await direct(url, calls, concurrency, tool, lambda _: arguments)
    return seconds, time.process_time() - cpu


async def one_round(args: argparse.Namespace, stack: Stack) -> dict[str, float]:
    """Everything measured on one stack."""
    http, url, c = stack.http, stack.backend_url, args.concurrency
    ideal = args.sleep_calls * SLEEP / c
    sleep_direct, _ = await direct_with_cpu(url, args.sleep_calls, c, {"seconds": SLEEP}, "sleep")
    sleep_service, _ = await run_batch(http, calls_of("sleep", args.sleep_calls, {"seconds": SLEEP}), c)
    echo_direct, client_cpu = await direct_with_cpu(url, args.sleep_calls, c, {"message": ""}, "echo")

    redis = await create_pool(RedisSettings.from_dsn(stack.redis_url))
    workers_before, redis_before = sum(map(cpu_seconds, stack.worker_pids)), await redis_cpu(redis)
    noop_total, document = await run_batch(http, calls_of("echo", args.noop_calls, {"message": ""}), c)
    worker_used = sum(map(cpu_seconds, stack.worker_pids)) - workers_before
    service = Run(args.noop_calls / document["elapsed_seconds"], worker_used, await redis_cpu(redis) - redis_before)
    await redis.aclose()
    arq = await raw_arq(stack.redis_url, args.noop_calls, len(stack.worker_pids), c)

    per_k = 1000 * 1000 / args.noop_calls  # CPU ms per 1,000 items
    return {
        "sleep_service": sleep_service,
        "sleep_ratio": sleep_service / ideal,
        "sleep_direct": sleep_direct,
        "direct_ratio": sleep_direct / ideal,
        "over_ceiling": sleep_service / sleep_direct,
        "noop_items": service.per_second,
        "noop_total": args.noop_calls / noop_total,
        "arq": arq.per_second,
        "ratio": service.per_second / arq.per_second,
        "echo_direct": args.sleep_calls / echo_direct,
        "of_ceiling": service.per_second / (args.sleep_calls / echo_direct),
        "service_worker_cpu": service.worker_cpu * per_k,
        "client_cpu": client_cpu * 1000 * 1000 / args.sleep_calls,
        "service_redis_cpu": service.redis_cpu * per_k,
        "arq_worker_cpu": arq.worker_cpu * per_k,
        "arq_redis_cpu": arq.redis_cpu * per_k,
        "cpu_ratio": (service.worker_cpu + service.redis_cpu) / (arq.worker_cpu + arq.redis_cpu),
        "own_ratio": (service.worker_cpu - client_cpu * args.noop_calls / args.sleep_calls + service.redis_cpu)
        / (arq.worker_cpu + arq.redis_cpu),
    }


def spread(values: list[float], fmt: str) -> str:
    """median (min-max)"""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(runs: dict[int, dict[str, list[float]]], columns: list[tuple[str, str, str]]) -> None:
    """A Markdown table: one row per worker count, each cell the median (min-max) of one measure."""
    print("| workers | " + " | ".join(header for header, _, _ in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for workers, measures in runs.items():
        cells = [spread(measures[key], fmt) for _, key, fmt in columns]
        print(f"| {workers} | " + " | ".join(cells) + " |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sleep-calls", type=int, default=2000)
    parser.add_argument("--noop-calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    env = {
        "MCP_BATCH_MAX_CALLS_PER_BATCH": str(max(args.sleep_calls, args.noop_calls)),
        "MCP_BATCH_MAX_CONCURRENCY_CEILING": str(args.concurrency),
    }
    runs: dict[int, dict[str, list[float]]] = {w: defaultdict(list) for w in args.workers}
    began, load = time.perf_counter(), os.getloadavg()[0]
    async with AsyncExitStack() as started:
        stacks = {w: await started.enter_async_context(service_stack(env, workers=w)) for w in args.workers}
        for workers, stack in stacks.items():  # warm-up sharded like the real batches: every worker opens its session
            await run_batch(stack.http, calls_of("sleep", 100 * workers, {"seconds": 0.01}), args.concurrency)
        for _ in range(args.rounds):
            for workers, stack in stacks.items():
                for name, value in (await one_round(args, stack)).items():
                    runs[workers][name].append(value)
    took = time.perf_counter() - began
    report(args, runs, load, took)


def report(args: argparse.Namespace, runs: dict[int, dict[str, list[float]]], load: float, took: float) -> None:
    ideal = args.sleep_calls * SLEEP / args.concurrency
    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, {platform.platform()}, Python {platform.python_version()}")
    print("  the demo backend (one process), the API, the workers, Redis and this client all share these cores;")
    print(f"  load average before/after {load:.2f}/{os.getloadavg()[0]:.2f}; median (min-max) over {args.rounds}")
    print(f"  interleaved rounds, {took:.0f} s in all. Quote the ratios, not the seconds.")
    print(f"\nA. {args.sleep_calls} x sleep {SLEEP * 1000:.0f} ms at max_concurrency {args.concurrency}, ", end="")
    print(f"ideal {args.sleep_calls} x {SLEEP} / {args.concurrency} = {ideal:.2f} s")
    table(
        runs,
        [
            ("submit -> completed (s)", "sleep_service", "{:.2f}"),
            ("time / ideal", "sleep_ratio", "{:.2f}"),
            ("backend ceiling: direct SDK client (s)", "sleep_direct", "{:.2f}"),
            ("ceiling / ideal", "direct_ratio", "{:.2f}"),
            ("service / ceiling", "over_ceiling", "{:.2f}"),
        ],
    )
    print(f"\nB. {args.noop_calls} no-op calls (echo, empty message) at max_concurrency {args.concurrency}, against")
    print(f"   {args.noop_calls} no-op arq jobs, max_jobs {args.concurrency} / processes")
    table(
        runs,
        [
            ("mcp-batch items/s (created -> finished)", "noop_items", "{:.0f}"),
            ("incl. submit and read", "noop_total", "{:.0f}"),
            ("raw arq jobs/s", "arq", "{:.0f}"),
            ("mcp-batch / arq", "ratio", "{:.2f}"),
            ("backend ceiling: direct echo calls/s", "echo_direct", "{:.0f}"),
            ("mcp-batch / ceiling", "of_ceiling", "{:.2f}"),
        ],
    )
    print("\n   CPU ms per 1,000 items (workers from /proc, Redis from INFO cpu), against per 1,000 arq jobs,")
    print("   and the direct SDK client's own CPU per 1,000 echo calls (what any MCP caller spends on the calls)")
    table(
        runs,
        [
            ("mcp-batch workers", "service_worker_cpu", "{:.0f}"),
            ("direct SDK client (per 1,000 calls)", "client_cpu", "{:.0f}"),
            ("mcp-batch Redis", "service_redis_cpu", "{:.0f}"),
            ("arq workers", "arq_worker_cpu", "{:.0f}"),
            ("arq Redis", "arq_redis_cpu", "{:.0f}"),
            ("workers + Redis, mcp-batch / arq", "cpu_ratio", "{:.2f}"),
            ("the same less the SDK client's CPU, / arq", "own_ratio", "{:.2f}"),
        ],
    )


def run(entry: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """On uvloop, like `mcp-batch worker`, so the direct client and the arq workers run on the same loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(entry())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--arq-worker"]:
        run(lambda: arq_worker_process(sys.argv[2], int(sys.argv[3])))
    else:
        run(main)
