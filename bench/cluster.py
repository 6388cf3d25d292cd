"""Redis CPU per item, on one Redis and on a 3-master Redis Cluster, side by side in one run.

    uv run python bench/cluster.py [--calls 4000] [--batches 30] [--rounds 3]

The backend is the demo server over stdio (`mcp-batch demo-backend`), its `echo` tool the call: fast, so what Redis
spends per item shows. The service runs as processes (`mcp-batch api`, one `mcp-batch worker`). Each round:
  1. one Redis: a batch of `--calls` echo calls (max_concurrency 8, one shard); Redis CPU (INFO cpu, user + sys)
     before and after, per item; and Redis commands per item (INFO commandstats); then the cluster's workload
     below on the same Redis, so the cluster's figures compare with one Redis doing the same work;
  2. a 3-master cluster as the data plane (MCP_BATCH_DATA_REDIS_URL=redis+cluster://...), the control plane on a
     Redis of its own: `--batches` batches of `--calls`/`--batches` calls each, one after another; the items each
     master held (by the slot of each batch's hash tag) and their spread (each master against the mean), and each
     master's CPU per item it held; and the control plane's CPU per item.
Medians over the rounds. The machine is shared (2 cores here): quote the ratios, and say it was loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import redis as sync_redis
import redis.asyncio as aioredis
from harness import (  # the script's own folder is on sys.path
    command_calls,
    current_tree,
    free_port,
    load,
    machine,
    redis_cpu,
    run_batch,
    service_stack,
)

SERVER = "fast"
PREFIX = "mcpb"


def echo_calls(count: int) -> list[dict[str, Any]]:
    return [{"server": SERVER, "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(count)]


@asynccontextmanager
async def cluster(workdir: Path, masters: int = 3) -> Any:
    """`masters` redis-server processes in cluster mode, joined with `redis-cli --cluster create`: their ports."""
    binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if binary is None or cli is None:
        raise SystemExit("redis-server and redis-cli must be on PATH")
    ports = [cluster_port() for _ in range(masters)]
    procs = []
    for port in ports:
        folder = workdir / f"node-{port}"
        folder.mkdir()
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--dir", str(folder)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))  # noqa: ASYNC220 - start-up
    try:
        for port in ports:
            for _ in range(200):
                try:
                    if sync_redis.Redis(port=port).ping():
                        break
                except sync_redis.ConnectionError:
                    await asyncio.sleep(0.05)
        create = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True)  # noqa: ASYNC221 - start-up
        for _ in range(200):
            if all(sync_redis.Redis(port=p).cluster("info")["cluster_state"] == "ok" for p in ports):
                break
            await asyncio.sleep(0.05)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def cluster_port() -> int:
    """A free port whose cluster bus port (10,000 higher) is free too."""
    while True:
        port = free_port()
        if port > 55_535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        return port


async def command_us(client: aioredis.Redis) -> float:
    """Microseconds Redis spent in commands so far (INFO commandstats), without its cron and cluster bus."""
    stats = await client.info("commandstats")
    return sum(float(row["usec"]) for name, row in stats.items() if name != "cmdstat_info")


async def cpu_of(ports: list[int]) -> dict[int, tuple[float, float]]:
    """Each node's CPU seconds (INFO cpu) and command µs so far."""
    found = {}
    for port in ports:
        async with aioredis.Redis(port=port) as client:
            found[port] = (await redis_cpu(client), await command_us(client))
    return found


def master_of(ports: list[int], key: str) -> int:
    client = sync_redis.Redis(port=ports[0])
    slot = int(client.cluster("keyslot", key))
    for low, high, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
        if int(low) <= slot <= int(high):
            return int(master[1])
    raise LookupError(key)


async def one_redis(servers: dict[str, Any], calls: int, batches: int) -> dict[str, float]:
    """One batch of `calls`, then the cluster's workload (`batches` batches sharing the calls), on one Redis."""
    async with service_stack(current_tree(), servers, 1) as stack:
        await run_batch(stack.http, echo_calls(50), 8)  # warm: sessions open, scripts loaded

        async def measured(sizes: list[int]) -> tuple[float, float, float]:
            cpu, commands, spent = (
                await redis_cpu(stack.redis),
                await command_calls(stack.redis),
                await command_us(stack.redis),
            )
            for size in sizes:
                await run_batch(stack.http, echo_calls(size), 8)
            cpu_after, commands_after = await redis_cpu(stack.redis), await command_calls(stack.redis)
            spent_after = await command_us(stack.redis)
            items = sum(sizes)
            count = sum(commands_after.values()) - sum(commands.values())
            return (cpu_after - cpu) / items * 1e6, count / items, (spent_after - spent) / items

        us, commands, cmd_us = await measured([calls])
        us_batches, _, cmd_us_batches = await measured([calls // batches] * batches)
    return {
        "us": us,
        "commands": commands,
        "cmd_us": cmd_us,
        "us_batches": us_batches,
        "cmd_us_batches": cmd_us_batches,
    }


async def on_cluster(servers: dict[str, Any], calls: int, batches: int) -> dict[str, float]:
    async with AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-cluster-")))
        ports = await stack.enter_async_context(cluster(tmp))
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        service = await stack.enter_async_context(
            service_stack(current_tree(), servers, 1, {"MCP_BATCH_DATA_REDIS_URL": url})
        )
        await run_batch(service.http, echo_calls(50), 8)
        each = calls // batches
        before, control = await cpu_of(ports), await redis_cpu(service.redis)
        held = dict.fromkeys(ports, 0)
        for _ in range(batches):
            _, document = await run_batch(service.http, echo_calls(each), 8)
            held[master_of(ports, f"{PREFIX}:batch:{{{document['id']}}}")] += each
        after, control_after = await cpu_of(ports), await redis_cpu(service.redis)
    mean = statistics.mean(held.values())
    per_master = [(after[p][0] - before[p][0]) / held[p] * 1e6 for p in ports if held[p]]
    in_commands = [(after[p][1] - before[p][1]) / held[p] for p in ports if held[p]]
    return {
        "spread": max(abs(n - mean) / mean for n in held.values()) * 100,
        "us_max": max(per_master),
        "us_mean": statistics.mean(per_master),
        "cmd_us_max": max(in_commands),
        "control_us": (control_after - control) / (each * batches) * 1e6,
        "items_min": min(held.values()),
        "items_max": max(held.values()),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tree = current_tree()
    servers = {"mcpServers": {SERVER: {"command": tree.command, "args": ["demo-backend"]}}}
    single: list[dict[str, float]] = []
    spread: list[dict[str, float]] = []
    for n in range(args.rounds):
        started = time.perf_counter()
        single.append(await one_redis(servers, args.calls, args.batches))
        spread.append(await on_cluster(servers, args.calls, args.batches))
        print(f"round {n + 1}: {time.perf_counter() - started:.0f} s, load {load()}", flush=True)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    one, same = med(single, "us"), med(single, "us_batches")
    worst, mean = med(spread, "us_max"), med(spread, "us_mean")
    cmd_one, cmd_same, cmd_worst = med(single, "cmd_us"), med(single, "cmd_us_batches"), med(spread, "cmd_us_max")
    each = args.calls // args.batches
    print(f"\n{machine()}; load {load()}; {args.calls} echo calls, {args.batches} batches on the cluster\n")
    print(
        f"| figure | one Redis, 1 batch of {args.calls} | one Redis, {args.batches} batches of {each} | "
        f"3-master cluster, the same {args.batches} batches | cluster / one batch | cluster / the same batches |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| Redis CPU per item, µs | {one:.1f} | {same:.1f} | {worst:.1f} (worst master) | {worst / one:.2f} | "
        f"{worst / same:.2f} |"
    )
    print(f"| Redis CPU per item, mean of masters, µs | - | - | {mean:.1f} | {mean / one:.2f} | {mean / same:.2f} |")
    print(
        f"| Redis time in commands per item (commandstats), µs | {cmd_one:.1f} | {cmd_same:.1f} | "
        f"{cmd_worst:.1f} (worst master) | {cmd_worst / cmd_one:.2f} | {cmd_worst / cmd_same:.2f} |"
    )
    control = med(spread, "control_us")
    print(f"| control plane CPU per item, µs | (in the above) | (in the above) | {control:.1f} | - | - |")
    print(f"| Redis commands per item | {med(single, 'commands'):.1f} | - | - | - | - |")
    print(
        f"| items per master: min / max, spread from the mean | - | - | {med(spread, 'items_min'):.0f} / "
        f"{med(spread, 'items_max'):.0f}, {med(spread, 'spread'):.0f} % | - | - |"
    )


if __name__ == "__main__":
    asyncio.run(main())
