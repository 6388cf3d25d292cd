"""The cost of an item, against a backend fast enough that the service's own cost shows; before and after.

    uv run python bench/cost.py [--calls 4000] [--rounds 4] [--workers 1 2] [--ref GITREF ...]

The backend is `@modelcontextprotocol/server-everything` (node) over stdio, installed into bench/.cache with npm
on first use; its `echo` tool is the call. For each tree (this checkout, and each --ref checked out into a
temporary worktree with `uv sync --frozen`), the service runs as processes (`mcp-batch api`, `mcp-batch worker`,
a private redis-server). Each round measures every tree in turn (the order alternates from round to round):
  1. fast backend, for 1 and 2 workers: `--calls` echo calls at concurrency 8 directly with one SDK `Client` (this
     process, on uvloop like the worker; once per round, shared by the trees), then for each tree one batch of the
     same calls with max_concurrency 8 (POST -> completed document). Per item: CPU of the worker processes
     themselves (/proc; their stdio backends are counted apart), of the API, of Redis (INFO cpu); Redis commands
     (INFO commandstats: a script's inner commands count, as does its EVALSHA); the SDK client's own CPU per
     direct call, and worker CPU / SDK CPU;
  2. submit: one POST of `--submit-calls` calls to an API with no worker, time to the 202, and the slowest of
     the /healthz requests a concurrent loop sends every ~10 ms meanwhile (and how many answered 503);
  3. GET /v1/batches/{id}/results of a completed `--results-calls` batch: median of 5 requests.
Every figure is the median over the rounds. The machine is shared by everything here: quote the ratios.
`--callgrind CALLS` adds, for each tree, one batch of CALLS echo calls (as in 1, one worker) on a stack whose
redis-server runs under valgrind's callgrind, counting only while that batch runs (its submit included): Redis's
instructions per item, which the machine's other load does not move.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from typing import Any

import httpx
from harness import (  # the script's own folder is on sys.path
    ROOT,
    Row,
    Stack,
    Tree,
    callgrind_total,
    checkout,
    children,
    command_calls,
    cpu_seconds,
    current_tree,
    descendants,
    instrument,
    load,
    machine,
    redis_cpu,
    run_batch,
    service_stack,
    side_by_side,
)
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

PACKAGE, VERSION = "@modelcontextprotocol/server-everything", "2026.8.31"
CACHE = ROOT / "bench" / ".cache"
SERVER = "fast"
Figures = dict[str, float]


def fast_backend() -> StdioServerParameters:
    """server-everything over stdio, installed (pinned, so runs compare) into bench/.cache when missing."""
    package = CACHE / "node_modules" / PACKAGE
    manifest = package / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text())["version"] != VERSION:
        subprocess.run(["npm", "install", "--prefix", str(CACHE), f"{PACKAGE}@{VERSION}"], check=True)
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is not on PATH")
    return StdioServerParameters(command=node, args=[str(package / "dist" / "index.js"), "stdio"])


def echo_calls(count: int) -> list[dict[str, Any]]:
    return [{"server": SERVER, "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(count)]


async def direct(backend: StdioServerParameters, calls: int, concurrency: int) -> Figures:
    """`calls` echo calls with one SDK client at `concurrency`: calls/s, this process's CPU and the backend's."""
    before = children(os.getpid())
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - /dev/null, before the clock starts
        async with Client(stdio_client(backend, errlog=quiet), cache=None) as client:
            await client.call_tool("echo", {"message": "warm-up"})
            (node,) = children(os.getpid()) - before
            todo = iter(range(calls))

            async def lane() -> None:
                for i in todo:
                    result = await client.call_tool("echo", {"message": f"m{i}"})
                    assert not result.is_error

            cpu, node_cpu, start = time.process_time(), cpu_seconds(node), time.perf_counter()
            await asyncio.gather(*(lane() for _ in range(concurrency)))
            seconds = time.perf_counter() - start
            cpu, node_cpu = time.process_time() - cpu, cpu_seconds(node) - node_cpu
    return {"direct": calls / seconds, "sdk_cpu": cpu / calls * 1e6, "direct_backend": node_cpu / calls * 1e6}


async def snapshot(stack: Stack) -> tuple[Figures, dict[str, int]]:
    """CPU seconds so far of the workers, their backends, the API and Redis; Redis calls per command."""
    backends = {pid for worker in stack.worker_pids for pid in descendants(worker)}
    cpu = {
        "worker": sum(map(cpu_seconds, stack.worker_pids)),
        "backend": sum(map(cpu_seconds, backends)),
        "api": cpu_seconds(stack.api_pid),
        "redis": await redis_cpu(stack.redis),
    }
    return cpu, await command_calls(stack.redis)


async def warm_up(stack: Stack, concurrency: int) -> None:
    """Small batches until every worker has opened its backend session, so no start-up lands in a round."""
    for _ in range(10):
        await run_batch(stack.http, echo_calls(100 * len(stack.worker_pids)), concurrency)
        if all(children(pid) for pid in stack.worker_pids):
            return
    raise RuntimeError(f"{stack.tree.label}: not every worker opened a backend session")


async def fast_round(stack: Stack, direct_figures: Figures, calls: int, concurrency: int) -> Figures:
    """One batch through `stack`, against the round's direct figures (shared by every tree, so a tree's ratio
    moves only with its own service figures)."""
    figures = dict(direct_figures)
    cpu, commands = await snapshot(stack)
    seconds, document = await run_batch(stack.http, echo_calls(calls), concurrency)
    cpu_after, commands_after = await snapshot(stack)
    figures["service"] = calls / seconds
    figures["run"] = calls / document["elapsed_seconds"] if document.get("elapsed_seconds") else 0.0
    figures["ratio"] = figures["service"] / figures["direct"]
    for name, value in cpu.items():
        figures[f"{name}_cpu"] = (cpu_after[name] - value) / calls * 1e6
    figures["worker_over_sdk"] = figures["worker_cpu"] / figures["sdk_cpu"]
    for name, count in commands_after.items():
        if count - commands.get(name, 0):
            figures[f"cmd:{name}"] = (count - commands.get(name, 0)) / calls
    figures["commands"] = sum(v for k, v in figures.items() if k.startswith("cmd:"))
    return figures


async def counted(tree: Tree, servers: dict[str, Any], settings: dict[str, str], calls: int, concurrency: int) -> float:
    """Redis's instructions per item of one batch, on a stack whose Redis runs under callgrind."""
    async with service_stack(tree, servers, 1, settings, callgrind=True) as stack:
        await warm_up(stack, concurrency)
        await instrument(stack.redis_pid, "on")
        await run_batch(stack.http, echo_calls(calls), concurrency)
        await instrument(stack.redis_pid, "off")
        await instrument(stack.redis_pid, "dump")
        return callgrind_total(stack.logs, "callgrind.out.1") / calls


async def submit_round(stack: Stack, body: bytes) -> Figures:
    """One big POST to an API with no worker; /healthz polled every ~10 ms meanwhile. Redis is emptied around it."""
    await stack.redis.flushdb()
    samples: list[tuple[float, float, bool]] = []  # (start, seconds, answered 200)
    done = asyncio.Event()
    async with httpx.AsyncClient(base_url=stack.http.base_url, timeout=120) as probe:
        await probe.get("/healthz")

        async def poll() -> None:
            while not done.is_set():
                start = time.perf_counter()
                ok = (await probe.get("/healthz")).status_code == 200  # 503: the API's Redis ping timed out
                samples.append((start, time.perf_counter() - start, ok))
                await asyncio.sleep(0.01)

        polling = asyncio.create_task(poll())
        await asyncio.sleep(0.1)
        start = time.perf_counter()
        response = await stack.http.post("/v1/batches", content=body, headers={"content-type": "application/json"})
        end = time.perf_counter()
        done.set()
        await polling
    if response.status_code != 202:
        raise RuntimeError(f"{stack.tree.label}: submit answered {response.status_code}: {response.text[:300]}")
    await stack.redis.flushdb()
    during = [(seconds, ok) for begun, seconds, ok in samples if begun < end and begun + seconds > start]
    return {
        "submit": end - start,
        "healthz_worst": max(seconds for seconds, _ in during) * 1000,
        "healthz_samples": len(during),
        "healthz_503": sum(not ok for _, ok in during),
    }


async def results_round(stack: Stack, batch_id: str, expected: int) -> Figures:
    times = []
    for _ in range(5):
        start = time.perf_counter()
        response = await stack.http.get(f"/v1/batches/{batch_id}/results")
        response.raise_for_status()
        times.append(time.perf_counter() - start)
        if response.text.count("\n") != expected:
            raise RuntimeError(f"{stack.tree.label}: /results sent {response.text.count(chr(10))} lines")
    return {"results": statistics.median(times) * 1000}


def print_report(args: argparse.Namespace, labels: list[str], figures: dict[str, dict[str, list[float]]]) -> None:
    rows: list[Row] = []
    for w in args.workers if figures[labels[-1]].get(f"w{args.workers[0]}.service") else []:
        rows += [
            (
                f"**{w} worker(s)**, {args.calls} echo calls at C={args.concurrency}: direct SDK calls/s",
                f"w{w}.direct",
                "{:.0f}",
            ),
            ("service items/s (POST -> completed)", f"w{w}.service", "{:.0f}"),
            ("service items/s (created -> finished)", f"w{w}.run", "{:.0f}"),
            ("throughput service / direct", f"w{w}.ratio", "{:.2f}"),
            ("worker CPU µs/item (the worker processes only)", f"w{w}.worker_cpu", "{:.0f}"),
            ("SDK client CPU µs/call (direct)", f"w{w}.sdk_cpu", "{:.0f}"),
            ("worker CPU / SDK client CPU", f"w{w}.worker_over_sdk", "{:.2f}"),
            ("API CPU µs/item", f"w{w}.api_cpu", "{:.0f}"),
            ("Redis CPU µs/item", f"w{w}.redis_cpu", "{:.1f}"),
            (f"Redis instructions/item (callgrind, one batch of {args.callgrind})", f"w{w}.instructions", "{:.0f}"),
            ("backend (node) CPU µs/item, via the service", f"w{w}.backend_cpu", "{:.0f}"),
            ("backend (node) CPU µs/call, direct", f"w{w}.direct_backend", "{:.0f}"),
            ("Redis commands/item (scripts' inner commands and EVALSHA)", f"w{w}.commands", "{:.1f}"),
        ]
        top: dict[str, float] = {}
        for label in labels:
            for key, values in figures[label].items():
                if key.startswith(f"w{w}.cmd:"):
                    top[key] = max(top.get(key, 0.0), statistics.median(values))
        for key in sorted(top, key=lambda k: -top[k])[:12]:
            rows.append((f"&nbsp;&nbsp;{key.split(':', 1)[1].upper()}/item", key, "{:.2f}"))
    rows += [
        (f"POST of {args.submit_calls} calls -> 202, s", "submit", "{:.2f}"),
        ("worst /healthz meanwhile, ms", "healthz_worst", "{:.0f}"),
        ("/healthz requests meanwhile", "healthz_samples", "{:.0f}"),
        ("of which answered 503 (Redis ping over 2 s)", "healthz_503", "{:.0f}"),
        (f"GET /results of {args.results_calls} items, ms (median of 5)", "results", "{:.0f}"),
    ]
    side_by_side(labels, [row for row in rows if any(figures[label].get(row[1]) for label in labels)], figures)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4, help="an even number balances the trees' order")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--submit-calls", type=int, default=100_000)
    parser.add_argument("--results-calls", type=int, default=10_000)
    parser.add_argument("--cases", default="fast,submit,results", help="which of fast,submit,results to run")
    parser.add_argument("--ref", action="extend", nargs="+", default=[], help="git refs to compare (the before)")
    parser.add_argument("--callgrind", type=int, default=0, metavar="CALLS", help="also count Redis's instructions")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    began, load_before = time.perf_counter(), load()
    backend = fast_backend()
    servers = {"mcpServers": {SERVER: {"command": backend.command, "args": backend.args}}}
    most = max(args.calls, args.submit_calls, args.results_calls, 1000)
    settings = {
        "MCP_BATCH_MAX_CALLS_PER_BATCH": str(most),
        "MCP_BATCH_MAX_BODY_BYTES": str(most * 200 + 1_000_000),
        "MCP_BATCH_MAX_UNFINISHED_ITEMS": str(most * 10),
    }
    submit_body = json.dumps({"calls": echo_calls(args.submit_calls), "max_concurrency": 8}).encode()
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    async with AsyncExitStack() as running:
        trees: list[Tree] = [await running.enter_async_context(checkout(ref)) for ref in args.ref]
        trees.append(current_tree())
        fast: dict[tuple[str, int], Stack] = {}
        submit: dict[str, Stack] = {}
        results: dict[str, tuple[Stack, str]] = {}
        for tree in trees:
            for workers in args.workers:
                if "fast" in cases or ("results" in cases and workers == args.workers[0]):
                    stack = await running.enter_async_context(service_stack(tree, servers, workers, settings))
                    await warm_up(stack, args.concurrency)
                    fast[tree.label, workers] = stack
            if "submit" in cases:
                submit[tree.label] = await running.enter_async_context(service_stack(tree, servers, 0, settings))
            if "results" in cases:
                stack = fast[tree.label, args.workers[0]]
                _, document = await run_batch(stack.http, echo_calls(args.results_calls), 32)
                results[tree.label] = stack, document["id"]
        for round_ in range(args.rounds):
            order = trees if round_ % 2 == 0 else trees[::-1]  # drift on the machine hits every tree alike
            for workers in args.workers if "fast" in cases else []:
                shared = await direct(backend, args.calls, args.concurrency)
                for tree in order:
                    found = await fast_round(fast[tree.label, workers], shared, args.calls, args.concurrency)
                    for name, value in found.items():
                        figures[tree.label][f"w{workers}.{name}"].append(value)
            for tree in order if "submit" in cases else []:
                for name, value in (await submit_round(submit[tree.label], submit_body)).items():
                    figures[tree.label][name].append(value)
            for tree in order if "results" in cases else []:
                stack, batch_id = results[tree.label]
                for name, value in (await results_round(stack, batch_id, args.results_calls)).items():
                    figures[tree.label][name].append(value)
            print(f"round {round_ + 1}/{args.rounds} done, load average {load()}", flush=True)
        for tree in trees if args.callgrind else []:
            found = await counted(tree, servers, settings, args.callgrind, args.concurrency)
            figures[tree.label][f"w{args.workers[0]}.instructions"].append(found)
    took = time.perf_counter() - began
    print(f"\nmachine: {machine()}")
    print(f"load average (1, 5, 15 min) at start {load_before}, at end {load()}; {took:.0f} s in all")
    print(f"trees: {', '.join(f'{t.label} at {t.path}' for t in trees)}")
    print(f"every figure is the median of {args.rounds} interleaved rounds (tree order alternates each round)")
    print(f"fast backend: {PACKAGE} {VERSION} over stdio, {args.calls} echo calls at concurrency {args.concurrency}")
    print_report(args, [t.label for t in trees], figures)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main())
