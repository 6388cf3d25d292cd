"""What calling as the tenant costs: one session per (backend, tenant), the credential in each request's header.

    uv run python bench/tenants.py [--calls 1000] [--tenants 50] [--rounds 3] [--concurrency 8]

One private redis-server, the demo backend over streamable HTTP, `mcp-batch api` and one `mcp-batch worker` as
processes, with keys on (one key per tenant, each with the `credentials` right) and MCP_BATCH_SECRETS_KEYS set. The
backend is configured twice: `static` (no auth) and `tenant` (`auth: tenant`, the same URL). Every tenant sets its
own secret first. Each round, in alternating order:
  1. `--calls` echo calls as one batch on `static`, and the same on `tenant`, from one tenant: the worker's CPU per
     call (/proc), tenant / static (target <= 1.05);
  2. `--calls` echo calls spread over `--tenants` tenants (one batch each, all submitted at once) on `tenant`, and the
     same calls as as many batches from one tenant: throughput, many / one (target >= 0.9).
Before the rounds: the worker's resident memory (VmRSS) once one tenant's session is open, and once every tenant's
is, and their ratio. Medians over the rounds. The machine is shared: quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
from harness import Stack, cpu_seconds, current_tree, free_port, load, machine, service_stack

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
    response = await http.post("/v1/batches", json={"calls": calls, "max_concurrency": concurrency}, headers=headers)
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


async def main(args: argparse.Namespace) -> None:
    keys = [new_key()[0] for _ in range(args.tenants)]
    async with AsyncExitStack() as stack:
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
            "MCP_BATCH_MAX_TENANT_SESSIONS": str(args.tenants + 8),
        }
        service = await stack.enter_async_context(service_stack(current_tree(), servers, 1, settings))
        for i, key in enumerate(keys):
            put = await service.http.put(
                "/v1/credentials/tenant", json={"secret": f"tok-{i}"}, headers={"Authorization": f"Bearer {key}"}
            )
            put.raise_for_status()
        (worker,) = service.worker_pids
        await batch_as(service.http, keys[0], echo_calls("tenant", 20) + echo_calls("static", 20), 4)
        one_session = rss_kib(worker)
        await spread(service, keys, len(keys) * 4, 2)
        all_sessions = rss_kib(worker)

        figures: dict[str, list[float]] = {k: [] for k in ("static", "tenant", "many", "one")}
        for round_ in range(args.rounds):
            order = ["static", "tenant"] if round_ % 2 == 0 else ["tenant", "static"]
            for server in order:
                figures[server].append(
                    await worker_cpu_per_call(service, keys[0], server, args.calls, args.concurrency)
                )
            for shape in ["many", "one"] if round_ % 2 == 0 else ["one", "many"]:
                chosen = keys if shape == "many" else [keys[0]] * len(keys)
                figures[shape].append(await spread(service, chosen, args.calls, args.concurrency))
            print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items()), flush=True)

    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"\nmachine: {machine()}; load average at the end: {load()}")
    print(
        f"{args.rounds} rounds, medians; {args.calls} calls per figure, max_concurrency {args.concurrency}, 1 worker\n"
    )
    print("| figure | value | target |")
    print("|---|---|---|")
    print(f"| worker CPU per call, static backend | {med['static']:.0f} µs | |")
    print(f"| worker CPU per call, `tenant` backend (one tenant) | {med['tenant']:.0f} µs | |")
    print(f"| CPU tenant / static (of the medians) | {med['tenant'] / med['static']:.3f} | <= 1.05 |")
    paired = statistics.median(t / st for t, st in zip(figures["tenant"], figures["static"], strict=True))
    print(f"| CPU tenant / static (median of each round's) | {paired:.3f} | <= 1.05 |")
    print(f"| throughput, {args.tenants} tenants' own credentials | {med['many']:.0f} calls/s | |")
    print(f"| throughput, one tenant (same batches) | {med['one']:.0f} calls/s | |")
    print(f"| throughput many / one (of the medians) | {med['many'] / med['one']:.3f} | >= 0.9 |")
    paired = statistics.median(m / o for m, o in zip(figures["many"], figures["one"], strict=True))
    print(f"| throughput many / one (median of each round's) | {paired:.3f} | >= 0.9 |")
    print(f"| worker RSS, one tenant's session | {one_session / 1024:.1f} MiB | |")
    print(f"| worker RSS, {args.tenants} tenants' sessions | {all_sessions / 1024:.1f} MiB | |")
    print(f"| RSS {args.tenants} / one | {all_sessions / one_session:.3f} | measured |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
