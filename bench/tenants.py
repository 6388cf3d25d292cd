"""What calling as the tenant costs: one session per (backend, tenant), the credential in each request's header.

    uv run python bench/tenants.py [--calls 1000] [--tenants 50] [--rounds 4] [--concurrency 8] [--ref GITREF ...]

One private redis-server, the demo backend over streamable HTTP, `mcp-batch api` and one `mcp-batch worker` as
processes, with keys on (one key per tenant, each with the `credentials` right) and MCP_BATCH_SECRETS_KEYS set. The
backend is configured twice: `static` (no auth) and `tenant` (`auth: tenant`, the same URL). Every tenant sets its
own secret first, then every tenant's session is opened. For each tree (each --ref checked out into a temporary
worktree, then this checkout), a stack of its own; each round measures every tree in turn, the trees' order reversed
from round to round (ABBA), and within a tree, in alternating order:
  1. `--calls` echo calls as one batch on `static`, and the same on `tenant`, from one tenant: the worker's CPU per
     call (/proc), tenant / static (target <= 1.05);
  2. `--calls` echo calls spread over `--tenants` tenants (one batch each, all submitted at once) on `tenant`, and the
     same calls as as many batches from one tenant: throughput, many / one (target >= 0.9).
Before the rounds: the worker's resident memory (VmRSS) once one tenant's session is open, and once every tenant's
is, and their ratio. Medians over the rounds with their range. The machine is shared: quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from harness import Stack, Tree, checkout, cpu_seconds, current_tree, free_port, load, machine, service_stack

from mcp_batch.credentials.sealing import new_key as new_secrets_key
from mcp_batch.tenants import hash_key, new_key
from mcp_batch_cli.dev import demo_http_backend


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def echo_calls(server: str, n: int, offset: int = 0) -> list[dict[str, Any]]:
    return [{"server": server, "tool": "echo", "arguments": {"message": f"m{offset + i}"}} for i in range(n)]


async def batch_as(http: httpx.AsyncClient, key: str, calls: list[dict[str, Any]], concurrency: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    body = {"calls": calls, "max_concurrency": concurrency}
    once = {"Idempotency-Key": uuid.uuid4().hex}  # a submit sent again over a fresh connection makes one batch
    for attempt in range(3):
        try:
            response = await http.post("/v1/batches", json=body, headers=headers | once)
            break
        except httpx.TransportError:  # a kept-alive connection the API closed as it was reused
            if attempt == 2:
                raise
    response.raise_for_status()
    batch_id = response.json()["id"]
    while True:
        got = await http.get(f"/v1/batches/{batch_id}", params={"wait": 60, "limit": 0}, headers=headers)
        document = got.json()
        if document["status"] in ("completed", "cancelled", "expired"):
            if document["counts"]["succeeded"] != len(calls):
                raise RuntimeError(f"batch ended {document['status']}: {document['counts']}")
            return


async def worker_cpu_per_call(stack: Stack, key: str, server: str, calls: int, concurrency: int) -> float:
    before = sum(cpu_seconds(pid) for pid in stack.worker_pids)
    await batch_as(stack.http, key, echo_calls(server, calls), concurrency)
    return (sum(cpu_seconds(pid) for pid in stack.worker_pids) - before) / calls * 1e6


async def spread(stack: Stack, keys: list[str], calls: int, concurrency: int) -> float:
    """Calls per second of `calls` calls as len(keys) batches submitted at once, batch i as keys[i]."""
    each = calls // len(keys)
    start = time.perf_counter()
    await asyncio.gather(
        *(batch_as(stack.http, key, echo_calls("tenant", each, i * each), concurrency) for i, key in enumerate(keys))
    )
    return each * len(keys) / (time.perf_counter() - start)


@dataclass
class Running:
    """One tree's stack, its tenants' keys, and what was measured on it."""

    stack: Stack
    keys: list[str]
    rss: tuple[int, int]  # the worker's VmRSS (KiB) with one tenant's session open, then with every tenant's
    figures: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in FIGURES})


FIGURES = ("static", "tenant", "ratio", "many", "one", "spread")


async def start(stack: AsyncExitStack, tree: Tree, tenants: int) -> Running:
    """`tree`'s stack: the demo backend as `static` and `tenant`, every tenant's secret set, every session open."""
    keys = [new_key()[0] for _ in range(tenants)]
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-tenants-")))
    port = free_port()
    await stack.enter_async_context(demo_http_backend(port))
    url = f"http://127.0.0.1:{port}/mcp"
    servers = {"mcpServers": {"static": {"url": url}, "tenant": {"url": url, "auth": {"type": "tenant"}}}}
    entries = [{"sha256": hash_key(k), "tenant": f"t{i}", "credentials": True} for i, k in enumerate(keys)]
    (tmp / "keys.json").write_text(json.dumps({"keys": entries}))
    settings = {
        "MCP_BATCH_AUTH": "keys",
        "MCP_BATCH_KEYS": str(tmp / "keys.json"),
        "MCP_BATCH_SECRETS_KEYS": json.dumps([new_secrets_key()]),
        "MCP_BATCH_MAX_TENANT_SESSIONS": str(tenants + 8),
    }
    service = await stack.enter_async_context(service_stack(tree, servers, 1, settings))
    for i, key in enumerate(keys):
        put = await service.http.put(
            "/v1/credentials/tenant", json={"secret": f"tok-{i}"}, headers={"Authorization": f"Bearer {key}"}
        )
        put.raise_for_status()
    (worker,) = service.worker_pids
    await batch_as(service.http, keys[0], echo_calls("tenant", 20) + echo_calls("static", 20), 4)
    one_session = rss_kib(worker)
    await spread(service, keys, len(keys) * 4, 2)
    return Running(service, keys, (one_session, rss_kib(worker)))


async def measure(run: Running, round_: int, calls: int, concurrency: int) -> None:
    """One round on one tree: CPU per call on `static` and on `tenant` (order alternating by round), then
    throughput of many tenants and of one (likewise)."""
    cpu = {}
    for server in ["static", "tenant"] if round_ % 2 == 0 else ["tenant", "static"]:
        cpu[server] = await worker_cpu_per_call(run.stack, run.keys[0], server, calls, concurrency)
    speed = {}
    for shape in ["many", "one"] if round_ % 2 == 0 else ["one", "many"]:
        chosen = run.keys if shape == "many" else [run.keys[0]] * len(run.keys)
        speed[shape] = await spread(run.stack, chosen, calls, concurrency)
    found = cpu | speed | {"ratio": cpu["tenant"] / cpu["static"], "spread": speed["many"] / speed["one"]}
    for name, value in found.items():
        run.figures[name].append(value)


def spread_of(values: list[float]) -> str:
    """The median and the range, as `m (lo-hi)`."""
    med = statistics.median(values)
    fmt = "{:.3f}" if med < 10 else "{:.0f}"
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


async def main(args: argparse.Namespace) -> None:
    async with AsyncExitStack() as stack:
        trees = [await stack.enter_async_context(checkout(ref)) for ref in args.ref]
        trees.append(current_tree())
        runs = [await start(stack, tree, args.tenants) for tree in trees]
        for round_ in range(args.rounds):
            # ABBA: the trees' order reverses every round, so drift on the machine hits each alike
            for run in runs if round_ % 2 == 0 else runs[::-1]:
                await measure(run, round_, args.calls, args.concurrency)
                said = ", ".join(f"{k} {v[-1]:.3g}" for k, v in run.figures.items())
                print(f"round {round_ + 1} {run.stack.tree.label}: {said}", flush=True)

    print(f"\nmachine: {machine()}; load average at the end: {load()}")
    print(
        f"{args.rounds} interleaved rounds (ABBA), median (lowest-highest); {args.calls} calls per figure, "
        f"max_concurrency {args.concurrency}, 1 worker, {args.tenants} tenants' sessions open\n"
    )
    rows = [
        ("worker CPU per call, static backend (µs)", "static"),
        ("worker CPU per call, `tenant` backend, one tenant (µs)", "tenant"),
        ("CPU tenant / static, each round's (target <= 1.05)", "ratio"),
        (f"throughput, {args.tenants} tenants' own credentials (calls/s)", "many"),
        ("throughput, one tenant, the same batches (calls/s)", "one"),
        ("throughput many / one, each round's (target >= 0.9)", "spread"),
    ]
    print("| figure | " + " | ".join(run.stack.tree.label for run in runs) + " |")
    print("|---" * (1 + len(runs)) + "|")
    for title, key in rows:
        print(f"| {title} | " + " | ".join(spread_of(run.figures[key]) for run in runs) + " |")
    for title, pick in (("one tenant's session", 0), (f"{args.tenants} tenants' sessions", 1)):
        print(f"| worker RSS, {title} (MiB) | " + " | ".join(f"{run.rss[pick] / 1024:.1f}" for run in runs) + " |")
    print("| RSS many / one | " + " | ".join(f"{run.rss[1] / run.rss[0]:.3f}" for run in runs) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4, help="an even number balances the order")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--ref", action="extend", nargs="+", default=[], help="git refs to compare (the before)")
    asyncio.run(main(parser.parse_args()))
