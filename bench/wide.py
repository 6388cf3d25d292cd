"""A wide batch: many slow calls in flight on one worker, its wall time against the ideal and what each call in
flight costs the worker in memory and CPU; before and after.

    uv run python bench/wide.py [--calls 2000] [--seconds 1.0] [--concurrency 256] [--rounds 2] [--ref PATH-OR-GITREF]

The backend is the demo backend's `sleep` tool over stdio (this tree's, for every tree), one worker. For each tree
(this checkout, and each --ref as in bench/latency.py) a stack runs (`mcp-batch api`, `mcp-batch worker`, a private
redis-server); each round runs one batch of `--calls` sleeps at max_concurrency `--concurrency` through every tree
in turn, the order alternating, and the same sleeps made directly (one SDK `Client` on the same backend, `--concurrency`
lanes): the floor this machine and this backend allow. Wall time is POST -> completed document; the ideal is calls x
seconds / concurrency, and no schedule beats ceil(calls / concurrency) x seconds (a lane's calls run one after another).
Memory: the worker tree's resident set (the worker and its backend process, /proc VmRSS) sampled every 50 ms, its
peak, and the worker process's own peak less its size before the batch, per call in flight. CPU: the worker
process's own, per call, and its backend's. Medians over the rounds (with low-high).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from contextlib import AsyncExitStack, suppress
from pathlib import Path

from harness import ROOT, Stack, cpu_seconds, current_tree, descendants, load, machine, run_batch, service_stack
from latency import open_tree  # the script's own folder is on sys.path
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client


def rss_mb(pid: int) -> float:
    with suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def one_round(stack: Stack, args: argparse.Namespace) -> dict[str, float]:
    (worker,) = stack.worker_pids
    calls = [
        {"server": "slow", "tool": "sleep", "arguments": {"seconds": args.seconds, "tag": str(i)}}
        for i in range(args.calls)
    ]
    idle, peak_tree, peak_worker = rss_mb(worker), 0.0, 0.0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak_tree, peak_worker
        while not done.is_set():
            own = rss_mb(worker)
            peak_worker = max(peak_worker, own)
            peak_tree = max(peak_tree, own + sum(rss_mb(pid) for pid in descendants(worker)))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    backends = descendants(worker)
    cpu, backend_cpu = cpu_seconds(worker), sum(map(cpu_seconds, backends))
    try:
        wall, _ = await run_batch(stack.http, calls, args.concurrency)
    finally:
        done.set()
        await sampler
    ideal = args.calls * args.seconds / args.concurrency
    return {
        "wall": wall,
        "ratio": wall / ideal,
        "peak_tree": peak_tree,
        "per_call_kb": (peak_worker - idle) * 1024 / args.concurrency,
        "cpu_us": (cpu_seconds(worker) - cpu) / args.calls * 1e6,
        "backend_us": (sum(map(cpu_seconds, backends)) - backend_cpu) / args.calls * 1e6,
    }


async def direct_round(args: argparse.Namespace) -> dict[str, float]:
    """The same sleeps with one SDK client on the same backend, `--concurrency` lanes: wall time, the backend's CPU."""
    backend = StdioServerParameters(command=sys.executable, args=["-m", "demo.server"], cwd=str(ROOT))
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - /dev/null, before the clock starts
        async with Client(stdio_client(backend, errlog=quiet), cache=None) as client:
            await client.call_tool("sleep", {"seconds": 0})
            todo = iter(range(args.calls))
            backends = descendants(os.getpid())
            backend_cpu = sum(map(cpu_seconds, backends))

            async def lane() -> None:
                for i in todo:
                    result = await client.call_tool("sleep", {"seconds": args.seconds, "tag": str(i)})
                    assert not result.is_error

            start = time.perf_counter()
            await asyncio.gather(*(lane() for _ in range(args.concurrency)))
            wall = time.perf_counter() - start
            backend_us = (sum(map(cpu_seconds, backends)) - backend_cpu) / args.calls * 1e6
    return {"wall": wall, "ratio": wall / (args.calls * args.seconds / args.concurrency), "backend_us": backend_us}


async def main(args: argparse.Namespace) -> None:
    servers = {"mcpServers": {"slow": {"command": sys.executable, "args": ["-m", "demo.server"], "cwd": str(ROOT)}}}
    settings = {"MCP_BATCH_MAX_CONCURRENCY_CEILING": str(max(256, args.concurrency))}
    async with AsyncExitStack() as running:
        trees = [current_tree(), *[await open_tree(running, ref) for ref in args.ref]]
        stacks = [await running.enter_async_context(service_stack(t, servers, 1, settings)) for t in trees]
        for stack in stacks:  # the session opens and the first calls warm the worker
            await run_batch(stack.http, [{"server": "slow", "tool": "sleep", "arguments": {"seconds": 0}}] * 8, 8)
        figures: dict[str, dict[str, list[float]]] = {"direct": {}} | {t.label: {} for t in trees}
        for r in range(args.rounds):
            for key, value in (await direct_round(args)).items():
                figures["direct"].setdefault(key, []).append(value)
            for stack in stacks if r % 2 == 0 else stacks[::-1]:
                for key, value in (await one_round(stack, args)).items():
                    figures[stack.tree.label].setdefault(key, []).append(value)
                figures[stack.tree.label].setdefault("over_direct", []).append(
                    figures[stack.tree.label]["wall"][-1] / figures["direct"]["wall"][-1]
                )
            print(f"round {r + 1}/{args.rounds} done, load average {load()}", file=sys.stderr)
    print(machine())
    ideal = args.calls * args.seconds / args.concurrency
    waves = math.ceil(args.calls / args.concurrency) * args.seconds
    print(
        f"{args.calls} sleeps of {args.seconds:g} s at {args.concurrency} in flight, 1 worker, ideal {ideal:.2f} s "
        f"(no schedule under {waves:.2f} s: {waves / ideal:.3f} of the ideal)\n"
    )
    labels = ["direct", *[t.label for t in trees]]
    print("| figure | " + " | ".join(labels) + " |")
    print("|---" * (1 + len(labels)) + "|")
    rows = [
        ("wall s", "wall", "{:.2f}"),
        ("wall / ideal", "ratio", "{:.3f}"),
        ("wall / the direct client's wall in the same round", "over_direct", "{:.3f}"),
        ("worker tree peak RSS MB (worker + backend)", "peak_tree", "{:.0f}"),
        ("worker's growth per call in flight, KB", "per_call_kb", "{:.0f}"),
        ("worker CPU µs per call", "cpu_us", "{:.0f}"),
        ("backend (demo, Python) CPU µs per call", "backend_us", "{:.0f}"),
    ]
    for title, key, form in rows:
        cells = []
        for label in labels:
            values = figures[label].get(key)
            if not values:
                cells.append("")
                continue
            low, high = form.format(min(values)), form.format(max(values))
            cells.append(f"{form.format(statistics.median(values))} ({low}-{high})")
        print(f"| {title} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ref", action="extend", nargs="+", default=[], help="checkouts (paths) or git refs")
    asyncio.run(main(parser.parse_args()))
