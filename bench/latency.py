"""What a batch costs its caller in time: submit -> done of small batches against the same calls made directly, where
the milliseconds go, and the throughput table; before and after.

    uv run python bench/latency.py [--rounds 20] [--sizes 1 5 50] [--held] [--calls 1000] [--throughput-rounds 2]
                                   [--workers 1 2] [--ref PATH-OR-GITREF ...]

The backend is the cost benchmark's: `@modelcontextprotocol/server-everything`'s `echo` over stdio (bench/cost.py).
Each tree (this checkout, and each --ref: the path of a checkout with its `.venv`, or a git ref checked out into a
temporary worktree) runs as processes (`mcp-batch api`, `mcp-batch worker`, a private redis-server).
  1. latency, 1 worker: each round, for each size, the same echo calls made directly (one SDK `Client`, its session
     open, at concurrency min(size, --concurrency)), then one batch of them through each tree (POST, then GET
     `?wait`; max_concurrency the same), the trees' order alternating from round to round. Median and p99 of each,
     and where a batch's time went, from the timestamps of its document and items (one clock: one machine): the
     POST, queued to claimed (the queue, the worker's wake-up, the claim), claimed to the first call sent, the
     calls, the last call's end to the batch finished in Redis (the record's round trip and any linger), and
     finished to the answer in hand (the done signal, the document's build, the HTTP answer); with --held, each
     size also as one POST ?wait (the submit held for the batch's end: one request);
  2. throughput, for each of --workers: `--calls` echo calls at --concurrency directly and as one batch through
     each tree (bench/cost.py's round: throughput service/direct, worker CPU per item / SDK client CPU per call);
  3. with --cpu-batches N, each size (and with --held each size as one POST ?wait) as N batches back to back through
     each tree, twice, the trees' order alternating: CPU per batch of the API, the worker, its backend and Redis, and
     the wall time per batch (the /proc clock ticks at 10 ms: only totals over many batches are exact enough).
Every figure is a median over the rounds; the machine is shared by everything here: quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from cost import SERVER, direct, echo_calls, fast_backend, fast_round, warm_up  # the script's own folder
from harness import (
    Stack,
    Tree,
    checkout,
    cpu_seconds,
    current_tree,
    descendants,
    load,
    machine,
    redis_cpu,
    service_stack,
    side_by_side,
)
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

# The parts of a batch's time, in order, each from one timestamp to the next (see `parts`).
PARTS = [
    ("post", "POST -> 202"),
    ("queued", "created -> claimed (queue, wake-up, claim)"),
    ("to_call", "claimed -> first call sent"),
    ("calls", "first call sent -> last call ended"),
    ("record", "last call ended -> batch finished in Redis"),
    ("answer", "finished -> answer in hand (done signal, document, HTTP)"),
]


_ENDED = ("completed", "cancelled", "expired")
_PROCESSES = [
    ("api", "the API's"),
    ("worker", "the worker's"),
    ("backend", "its backend's (node)"),
    ("redis", "Redis's"),
]


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


async def timed_batch(
    stack: Stack, calls: list[dict[str, Any]], concurrency: int, held: bool = False
) -> dict[str, float]:
    """One batch: submit -> done in ms (POST, then GET ?wait; `held`: one POST ?wait, then GET ?wait only if the
    batch outlived it), and its parts from the document's timestamps."""
    http = stack.http
    wall, start = time.time(), time.perf_counter()
    body = {"calls": calls, "max_concurrency": concurrency}
    params = {"wait": 60, "limit": len(calls)} if held else {}
    response = await http.post("/v1/batches", json=body, params=params)
    posted = time.time()
    response.raise_for_status()
    document = response.json()
    batch_id = document["id"]
    ended = held and document["status"] in _ENDED  # a tree without POST ?wait answers at once: read as below
    while not ended:
        document = (await http.get(f"/v1/batches/{batch_id}", params={"wait": 60, "limit": len(calls)})).json()
        ended = document["status"] in _ENDED
    total, done = (time.perf_counter() - start) * 1000, time.time()
    if document["counts"]["succeeded"] != len(calls) or len(document["results"]) != len(calls):
        raise RuntimeError(f"{stack.tree.label}: batch {batch_id} ended {document['status']}: {document['counts']}")
    items = document["results"]
    # One clock on one machine: the API stamps created_at, the worker the claim, the calls and the finish.
    stamps = [
        _ts(document["created_at"]),
        _ts(document["started_at"]),
        min(_ts(item["started_at"]) for item in items),
        max(_ts(item["finished_at"]) for item in items),
        _ts(document["finished_at"]),
        done,
    ]
    # With POST ?wait the POST's own answer is the end's: its first part runs to the batch's creation instead.
    figures = {"total": total, "post": (posted - wall if not params else stamps[0] - wall) * 1000}
    for (key, _), begin, end in zip(PARTS[1:], stamps[:-1], stamps[1:], strict=True):
        figures[key] = (end - begin) * 1000
    return figures


async def cpu_per_batch(stack: Stack, size: int, count: int, concurrency: int, held: bool) -> dict[str, float]:
    """`count` batches of `size` echo calls back to back (timed as the latency rounds time them): CPU ms per batch of
    the API, the worker, its backend and Redis, and the wall ms per batch."""
    backends = [pid for worker in stack.worker_pids for pid in descendants(worker)]

    def now() -> dict[str, float]:
        cpu = {"api": cpu_seconds(stack.api_pid), "worker": sum(map(cpu_seconds, stack.worker_pids))}
        return cpu | {"backend": sum(map(cpu_seconds, backends)), "wall": time.perf_counter()}

    before, redis_before = now(), await redis_cpu(stack.redis)
    for _ in range(count):
        await timed_batch(stack, echo_calls(size), concurrency, held)
    after, redis_after = now(), await redis_cpu(stack.redis)
    figures = {name: (after[name] - before[name]) / count * 1000 for name in before}
    return figures | {"redis": (redis_after - redis_before) / count * 1000}


@asynccontextmanager
async def direct_client(backend: StdioServerParameters) -> AsyncIterator[Client]:
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - /dev/null, before any clock starts
        async with Client(stdio_client(backend, errlog=quiet), cache=None) as client:
            await client.call_tool("echo", {"message": "warm-up"})
            yield client


async def direct_calls(client: Client, size: int, concurrency: int) -> float:
    """`size` echo calls on an open session at `concurrency`, in ms."""
    todo = iter(range(size))

    async def lane() -> None:
        for i in todo:
            result = await client.call_tool("echo", {"message": f"m{i}"})
            assert not result.is_error

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return (time.perf_counter() - start) * 1000


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


async def takes_held(stack: Stack) -> bool:
    """Whether the tree's POST takes ?wait (an older one refuses the parameter)."""
    response = await stack.http.post("/v1/batches", json={"calls": echo_calls(1)}, params={"wait": 5})
    return response.status_code != 422


def variants(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(sample key, row title) of each way a batch is timed: POST then GET ?wait, and with --held one POST ?wait."""
    found = [(f"{size}", f"{size} call(s)") for size in args.sizes]
    if args.held:
        found += [(f"{size}h", f"{size} call(s), POST ?wait") for size in args.sizes]
    return found


def print_latency(args: argparse.Namespace, labels: list[str], samples: dict[str, dict[str, list[float]]]) -> None:
    columns = ["direct", *labels]
    print(
        "| batch | "
        + " | ".join(f"{c}: median / p99 ms" for c in columns)
        + " | "
        + " | ".join(f"{label.split()[0]} - direct, median ms" for label in labels)
        + " |"
    )
    print("|---" * (1 + 2 * len(columns) - 1) + "|")
    for key, title in variants(args):
        cells = []
        for column in columns:
            values = samples[column][f"{key}.total"]
            cells.append(f"{statistics.median(values):.1f} / {p99(values):.1f}")
        base = statistics.median(samples["direct"][f"{key}.total"])
        cells += [f"{statistics.median(samples[label][f'{key}.total']) - base:+.1f}" for label in labels]
        print(f"| {title} | " + " | ".join(cells) + " |")
    print("\nWhere a batch's time went (medians, ms; the parts' medians need not add up to the total's):\n")
    timed = variants(args)
    print("| part | " + " | ".join(f"{label.split()[0]}, {title}" for _, title in timed for label in labels) + " |")
    print("|---" * (1 + len(timed) * len(labels)) + "|")
    for part, title in [*PARTS, ("total", "**submit -> done**")]:
        cells = [f"{statistics.median(samples[label][f'{key}.{part}']):.2f}" for key, _ in timed for label in labels]
        print(f"| {title} | " + " | ".join(cells) + " |")


async def open_tree(running: AsyncExitStack, ref: str) -> Tree:
    """A checkout given by its path (with its `.venv`), or a git ref checked out for the run."""
    path = Path(ref).resolve()  # noqa: ASYNC240 - start-up
    if (path / ".venv" / "bin" / "mcp-batch").exists():
        return Tree(f"ref ({path})", path)
    return await running.enter_async_context(checkout(ref))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="latency rounds (each measures every size)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 50])
    parser.add_argument("--held", action="store_true", help="also time each size as one POST ?wait")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--calls", type=int, default=1000, help="calls of a throughput batch")
    parser.add_argument("--throughput-rounds", type=int, default=2, help="0 leaves the throughput table out")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker processes, for throughput")
    parser.add_argument("--ref", action="extend", nargs="+", default=[], help="checkouts (paths) or git refs")
    parser.add_argument("--cpu-batches", type=int, default=0, help="batches back to back for CPU per batch")
    args = parser.parse_args()
    began, load_before = time.perf_counter(), load()
    backend = fast_backend()
    servers = {"mcpServers": {SERVER: {"command": backend.command, "args": backend.args}}}
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    async with AsyncExitStack() as running:
        trees = [await open_tree(running, ref) for ref in args.ref]
        trees.append(current_tree())
        labels = [tree.label for tree in trees]
        stacks: dict[tuple[str, int], Stack] = {}
        for tree in trees:
            for workers in sorted({1, *(args.workers if args.throughput_rounds else [])}):
                stack = await running.enter_async_context(service_stack(tree, servers, workers))
                await warm_up(stack, args.concurrency)
                stacks[tree.label, workers] = stack
        holds = {tree.label: await takes_held(stacks[tree.label, 1]) for tree in trees}
        client = await running.enter_async_context(direct_client(backend))
        for round_ in range(args.rounds):
            order = trees if round_ % 2 == 0 else trees[::-1]  # drift on the machine hits every side alike
            for key, _ in variants(args):
                size = int(key.removesuffix("h"))
                concurrency = min(size, args.concurrency)
                samples["direct"][f"{key}.total"].append(await direct_calls(client, size, concurrency))
                for tree in order:
                    held = key.endswith("h") and holds[tree.label]  # else timed as a POST then GET ?wait
                    found = await timed_batch(stacks[tree.label, 1], echo_calls(size), concurrency, held)
                    for part, value in found.items():
                        samples[tree.label][f"{key}.{part}"].append(value)
        print(f"latency: {args.rounds} rounds done, load average {load()}", flush=True)
        spent: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for round_ in range(2 if args.cpu_batches else 0):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                for key, _ in variants(args):
                    size, held = int(key.removesuffix("h")), key.endswith("h") and holds[tree.label]
                    stack, concurrency = stacks[tree.label, 1], min(size, args.concurrency)
                    for name, value in (await cpu_per_batch(stack, size, args.cpu_batches, concurrency, held)).items():
                        spent[tree.label][f"{key}.{name}"].append(value)
            print(f"CPU round {round_ + 1}/2 done, load average {load()}", flush=True)
        throughput: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for round_ in range(args.throughput_rounds):
            order = trees if round_ % 2 == 0 else trees[::-1]
            for workers in args.workers:
                shared = await direct(backend, args.calls, args.concurrency)
                for tree in order:
                    found = await fast_round(stacks[tree.label, workers], shared, args.calls, args.concurrency)
                    for name, value in found.items():
                        throughput[tree.label][f"w{workers}.{name}"].append(value)
            print(f"throughput round {round_ + 1}/{args.throughput_rounds} done, load average {load()}", flush=True)
    print(f"\nmachine: {machine()}")
    print(f"load average (1, 5, 15 min) at start {load_before}, at end {load()}; {time.perf_counter() - began:.0f} s")
    print(f"trees: {', '.join(f'{t.label} at {t.path}' for t in trees)}")
    print(f"latency: {args.rounds} interleaved rounds, echo over stdio, 1 worker; batches POST then GET ?wait")
    if args.held:
        print("(POST ?wait rows: the POST held for the end; its first part is the POST to the batch's creation)")
        for label in (label for label, held in holds.items() if not held):
            print(f"({label} takes no POST ?wait: its POST ?wait rows are a POST then GET ?wait)")
    print()
    print_latency(args, labels, samples)
    if args.cpu_batches:
        print(f"\nCPU ms per batch, {args.cpu_batches} batches back to back, mean of 2 interleaved passes\n")
        rows = []
        for key, title in variants(args):
            rows += [(f"**{title}**: wall ms per batch", f"{key}.wall", "{:.2f}")]
            rows += [(f"{name} CPU", f"{key}.{part}", "{:.2f}") for part, name in _PROCESSES]
        side_by_side(labels, rows, spent)
    if args.throughput_rounds:
        print(
            f"\nthroughput: {args.calls} echo calls at C={args.concurrency}, "
            f"{args.throughput_rounds} interleaved rounds\n"
        )
        rows = []
        for w in args.workers:
            rows += [
                (f"**{w} worker(s)**: throughput service / direct", f"w{w}.ratio", "{:.2f}"),
                ("worker CPU µs/item", f"w{w}.worker_cpu", "{:.0f}"),
                ("SDK client CPU µs/call (direct)", f"w{w}.sdk_cpu", "{:.0f}"),
                ("worker CPU / SDK client CPU", f"w{w}.worker_over_sdk", "{:.2f}"),
                ("Redis commands/item", f"w{w}.commands", "{:.1f}"),
            ]
        side_by_side(labels, rows, throughput)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
