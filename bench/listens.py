"""What one tenant's open task listens cost another tenant: MCP `subscriptions/listen` of 100 task ids each.

    uv run python bench/listens.py [--before c7c5684^] [--rounds 3] [--listens 200] [--keys 20] [--seconds 5]

Two trees side by side, each as processes on its own private Redis (`mcp-batch api`, no worker, so every task stays
queued and every listen stays open): `--before` (default: the commit before listens were capped and their reads
shared) and the current tree. The demo backend over streamable HTTP; keys on: tenant `a` holds `--keys` keys,
tenant `b` one. Tenant `b` queues one batch. Each round, the trees in alternating order, three scenes in alternating
order, each with 100 one-call batches of tenant `a` queued for it and cancelled at its end (which ends its listens):
  - idle: no listen open;
  - one key: `--listens` listens of a's 100 task ids asked with one key (the cap refuses what is past it);
  - many keys: `--listens` listens of the same ids spread over a's `--keys` keys (within the cap: all open).
In each scene, for `--seconds`: tenant b reads its batch (GET /v1/batches/{id}?limit=0) one request after another
(the latency of each), and the API process's CPU (/proc) over the same window. Medians over the rounds, with the
lowest and highest round. The machine is shared: its load is printed; quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
from harness import Stack, Tree, checkout, cpu_seconds, current_tree, free_port, load, machine, service_stack

from mcp_batch.tenants import hash_key, new_key
from mcp_batch_cli.dev import demo_http_backend

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
SCENES = ("idle", "one key", "many keys")
_ids = itertools.count(1)


def listen_body(task_ids: list[str]) -> str:
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    }
    params = {"notifications": {"taskIds": task_ids}, "_meta": meta}
    return json.dumps({"jsonrpc": "2.0", "id": next(_ids), "method": "subscriptions/listen", "params": params})


async def listen(http: httpx.AsyncClient, key: str, task_ids: list[str], opened: Callable[[bool], None]) -> None:
    """One listen, held open until cancelled; `opened(True)` once acknowledged, `opened(False)` when refused."""
    headers = {
        "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "subscriptions/listen",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    told = False
    async with http.stream("POST", "/mcp/", content=listen_body(task_ids), headers=headers) as response:
        async for line in response.aiter_lines():
            if not told and line.startswith("data: "):
                message = json.loads(line.removeprefix("data: "))
                opened("error" not in message)
                told = True
                if "error" in message:
                    return
    if not told:
        opened(False)


async def submit(http: httpx.AsyncClient, key: str) -> str:
    calls = [{"server": "demo", "tool": "echo", "arguments": {"message": "m"}}]
    response = await http.post("/v1/batches", json={"calls": calls}, headers={"Authorization": f"Bearer {key}"})
    response.raise_for_status()
    return str(response.json()["id"])


async def scene(
    stack: Stack, name: str, a_keys: list[str], b: tuple[str, str], args: argparse.Namespace
) -> dict[str, float]:
    """One scene's figures: b's median and 90th percentile latency (ms), the API's CPU (%), listens open. Tenant a's
    100 tasks are queued for the scene and cancelled at its end, which ends every listen of them."""
    task_ids = [await submit(stack.http, a_keys[i % len(a_keys)]) for i in range(100)]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=str(stack.http.base_url), timeout=120, limits=limits) as listener:
        answers: list[bool] = []
        every = asyncio.Event()

        def opened(ok: bool) -> None:
            answers.append(ok)
            if len(answers) == args.listens:
                every.set()

        keys = [] if name == "idle" else [a_keys[0]] if name == "one key" else a_keys
        held = [
            asyncio.create_task(listen(listener, keys[i % len(keys)], task_ids, opened))
            for i in range(args.listens)
            if keys
        ]
        if held:
            await asyncio.wait_for(every.wait(), 120)
        open_now = sum(answers)
        b_key, b_batch = b
        seconds: list[float] = []
        cpu_before, wall_before = cpu_seconds(stack.api_pid), time.monotonic()
        until = wall_before + args.seconds
        while time.monotonic() < until:
            started = time.perf_counter()
            got = await stack.http.get(
                f"/v1/batches/{b_batch}", params={"limit": 0}, headers={"Authorization": f"Bearer {b_key}"}
            )
            got.raise_for_status()
            seconds.append(time.perf_counter() - started)
        cpu = (cpu_seconds(stack.api_pid) - cpu_before) / (time.monotonic() - wall_before) * 100
        for i, task_id in enumerate(task_ids):
            cancel = f"/v1/batches/{task_id}/cancel"
            await stack.http.post(cancel, headers={"Authorization": f"Bearer {a_keys[i % len(a_keys)]}"})
        await asyncio.wait_for(asyncio.gather(*held, return_exceptions=True), 120)
    ms = sorted(s * 1000 for s in seconds)
    return {"median": statistics.median(ms), "p90": ms[int(len(ms) * 0.9)], "cpu": cpu, "open": open_now}


def spread(values: list[float], fmt: str) -> str:
    low, high = fmt.format(min(values)), fmt.format(max(values))
    return f"{fmt.format(statistics.median(values))} ({low} to {high})"


async def main(args: argparse.Namespace) -> None:
    a_keys, b_key = [new_key()[0] for _ in range(args.keys)], new_key()[0]
    async with AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-listens-")))
        port = free_port()
        await stack.enter_async_context(demo_http_backend(port))
        servers = {"mcpServers": {"demo": {"url": f"http://127.0.0.1:{port}/mcp"}}}
        entries = [{"sha256": hash_key(k), "tenant": "a", "write": True} for k in a_keys]
        entries.append({"sha256": hash_key(b_key), "tenant": "b", "write": True})
        (tmp / "keys.json").write_text(json.dumps({"keys": entries}))
        settings = {
            "MCP_BATCH_AUTH": "keys",
            "MCP_BATCH_KEYS": str(tmp / "keys.json"),
            "MCP_BATCH_MCP_TASK_WAIT_SECONDS": "0",
        }
        trees: list[Tree] = [await stack.enter_async_context(checkout(args.before)), current_tree()]
        stacks = [await stack.enter_async_context(service_stack(tree, servers, 0, settings)) for tree in trees]
        b_batches = [(b_key, await submit(s.http, b_key)) for s in stacks]
        figures: dict[tuple[str, str], list[dict[str, float]]] = {}
        for round_ in range(args.rounds):
            order = list(range(len(stacks))) if round_ % 2 == 0 else list(reversed(range(len(stacks))))
            scenes = SCENES if round_ % 2 == 0 else tuple(reversed(SCENES))
            for i in order:
                for name in scenes:
                    got = await scene(stacks[i], name, a_keys, b_batches[i], args)
                    figures.setdefault((trees[i].label, name), []).append(got)
                    print(f"round {round_ + 1} {trees[i].label} {name}: {got}", flush=True)

    print(f"\nmachine: {machine()}; load average at the end: {load()}")
    print(
        f"{args.rounds} rounds, median (lowest-highest round); {args.listens} listens of 100 task ids each, "
        f"{args.keys} keys in the many-keys scene; b's reads for {args.seconds:.0f} s per scene\n"
    )
    print("| tree | scene | listens open | b's median (ms) | b's p90 (ms) | API CPU (%) |")
    print("|---|---|---|---|---|---|")
    for (label, name), rows in figures.items():
        cells = [
            spread([r["open"] for r in rows], "{:.0f}"),
            spread([r["median"] for r in rows], "{:.1f}"),
            spread([r["p90"] for r in rows], "{:.1f}"),
            spread([r["cpu"] for r in rows], "{:.0f}"),
        ]
        print(f"| {label} | {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", default="c7c5684^", help="the tree to compare with (a git ref)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--listens", type=int, default=200)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=5.0)
    asyncio.run(main(parser.parse_args()))
