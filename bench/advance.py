"""Redis's cost of the worker's finish-and-claim round trip (Claims.step), this tree against a reference.

    uv run python bench/advance.py [--ref main] [--items 20000] [--rounds 5] [--per-step 8] [--callgrind ITEMS]

For each tree (this checkout, and `--ref` checked out into a temporary worktree), a child process run with that tree's
own virtualenv starts a private redis-server on a loopback port in 6400-6499, stores one batch of `--items` echo calls
through the store (`Submits.create`), and drives `Claims.step` as a shard job's feeder does: each step finishes the
claims the last one gave (records shaped like a fast echo's) and asks for `--per-step` more. Measured from the first
step on: Redis CPU per item (INFO cpu, the process's user + sys, and its main thread's), commands per item (INFO
commandstats: a script's inner commands count, as does its EVALSHA), µs per EVALSHA (its `usec`), and the driving
process's own CPU per item (what a worker spends on the round trip: packing, redis-py, the claims). The submit that
stores the batch is measured apart: Redis's CPU per call stored. Rounds interleave the trees (the order alternates);
every figure is the median over the rounds.

`--callgrind ITEMS` adds one run per tree with redis-server under valgrind's callgrind, instrumented only while the
submit and the steps run: instructions per call stored and per item, which the machine's other load does not move.
`--per-step 32` is about what a worker reading ahead for 8 lanes carries in a round trip (worker/feeder.py).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import AsyncExitStack
from pathlib import Path

from harness import callgrind_argv, callgrind_total, instrument  # the script's own folder

Figures = dict[str, float]
PORTS = range(6400, 6500)
CPU = ("used_cpu_user", "used_cpu_sys")  # INFO cpu: the server's process
MAIN_THREAD = ("used_cpu_user_main_thread", "used_cpu_sys_main_thread")


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit("no free port in 6400-6499")


def redis_argv(port: int, workdir: Path, callgrind: bool) -> list[str]:
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    return [*callgrind_argv(workdir), *argv] if callgrind else argv


async def child(items: int, per_step: int, callgrind: bool) -> Figures:
    """One tree's run (this process imports that tree's modules): one batch driven step by step."""
    import redis.asyncio as aioredis
    from redis.exceptions import ConnectionError as RedisConnectionError

    from mcp_batch import shards
    from mcp_batch.keys import Keys
    from mcp_batch.models import BatchRequest, ItemStatus
    from mcp_batch.records import record
    from mcp_batch.store import Store
    from mcp_batch.store.placement import new_batch_id

    with tempfile.TemporaryDirectory(prefix="mcp-batch-advance-") as tmp:
        workdir, port = Path(tmp), free_port()
        argv = redis_argv(port, workdir, callgrind)
        server = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.DEVNULL)  # noqa: ASYNC220 - start-up
        async with AsyncExitStack() as stack:
            stack.callback(server.wait, 60)
            stack.callback(server.terminate)
            redis = aioredis.Redis(port=port)
            stack.push_async_callback(redis.aclose)
            for _ in range(600 if callgrind else 100):
                try:
                    await redis.ping()
                    break
                except RedisConnectionError:
                    await asyncio.sleep(0.1)
            store = Store(redis, Keys(), 3600)
            calls = [{"server": "fast", "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(items)]
            batch_id = new_batch_id()
            job = shards.job_id(batch_id, 0)
            request = BatchRequest.model_validate({"calls": calls})
            stored_before = await redis.info("cpu")
            if callgrind:
                await instrument(server.pid, "on")
            await store.submits.create(request, per_step, batch_id=batch_id, jobs=[job])
            if callgrind:
                await instrument(server.pid, "off")
                await instrument(server.pid, "dump")  # the submit's count, in callgrind.out.1
            stored_after = await redis.info("cpu")
            now = time.time()
            records = [
                record(
                    ItemStatus.ok,
                    started=now,
                    finished=now + 0.0012,
                    worker="bench-host:4242",
                    queued_seconds=0.0153,
                    content=[{"type": "text", "text": f"Echo: m{i}"}],
                    is_error=False,
                    elapsed_seconds=0.0012,
                    attempts=1,
                )
                for i in range(items)
            ]
            lanes = (per_step, 0, per_step)
            await redis.config_resetstat()
            before = await redis.info("cpu")
            if callgrind:
                await instrument(server.pid, "on")
            start, steps, used = time.perf_counter(), 0, time.process_time()
            # Each record goes with its seq, as a shard job's feeder sends it, where the tree's store takes one.
            seqs = "seq" in inspect.signature(store.claims.step).parameters
            step = await store.claims.step(batch_id, job, [], per_step, lanes=lanes)
            while step.claims:
                done = [(claim, records[claim.index]) for claim in step.claims]
                told = {"seq": step.next_seq} if seqs else {}
                step = await store.claims.step(batch_id, job, done, per_step, lanes=lanes, **told)
                steps += 1
            wall, used = time.perf_counter() - start, time.process_time() - used
            if callgrind:
                await instrument(server.pid, "off")
            after = await redis.info("cpu")
            stats = await redis.info("commandstats")
            row = await store.reads.row(batch_id)
            if row.finished != items or row.status != "completed":
                raise RuntimeError(f"the batch ended {row.status} with {row.finished} of {items} finished")
        cpu = {key: float(after[key]) - float(before[key]) for key in (*CPU, *MAIN_THREAD)}
        commands = {name.removeprefix("cmdstat_"): row for name, row in stats.items() if "info" not in name}
        evalsha = commands.get("evalsha", {"calls": 0, "usec": 0})
        figures = {
            "submit_cpu": sum(float(stored_after[k]) - float(stored_before[k]) for k in CPU) / items * 1e6,
            "cpu": sum(cpu[key] for key in CPU) / items * 1e6,
            "main": sum(cpu[key] for key in MAIN_THREAD) / items * 1e6,
            "commands": sum(int(r["calls"]) for r in commands.values()) / items,
            "evalsha": int(evalsha["usec"]) / max(1, int(evalsha["calls"])),
            "evalsha_item": int(evalsha["usec"]) / items,
            "steps": steps,
            "wall": wall / items * 1e6,
            "client": used / items * 1e6,
        }
        if callgrind:
            figures["instructions"] = callgrind_total(workdir) / items
            figures["submit_instructions"] = callgrind_total(workdir, "callgrind.out.1") / items
        return figures


def run_child(python: Path, cwd: Path, items: int, per_step: int, callgrind: bool) -> Figures:
    argv = [str(python), __file__, "--child", "--items", str(items), "--per-step", str(per_step)]
    if callgrind:
        argv.append("--callgrind-child")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_BATCH_", "VIRTUAL_ENV"))}
    done = subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    figures: Figures = json.loads(done.stdout.splitlines()[-1])
    return figures


ROWS = [
    ("submit: Redis CPU µs per call stored (Submits.create)", "submit_cpu", "{:.2f}"),
    ("submit: instructions per call stored (callgrind)", "submit_instructions", "{:.0f}"),
    ("Redis CPU µs/item (user + sys)", "cpu", "{:.2f}"),
    ("Redis main thread CPU µs/item", "main", "{:.2f}"),
    ("µs per EVALSHA (commandstats usec)", "evalsha", "{:.2f}"),
    ("EVALSHA µs/item (commandstats usec)", "evalsha_item", "{:.2f}"),
    ("Redis commands/item", "commands", "{:.3f}"),
    ("wall µs/item (client included)", "wall", "{:.1f}"),
    ("client CPU µs/item (the worker's side: pack, send, parse, claims)", "client", "{:.1f}"),
    ("instructions/item (callgrind)", "instructions", "{:.0f}"),
]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default="main", help="the git ref to compare against")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-step", type=int, default=8, help="records finished and claims asked for per step")
    parser.add_argument("--callgrind", type=int, default=0, metavar="ITEMS", help="also count instructions")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--callgrind-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(await child(args.items, args.per_step, args.callgrind_child)))
        return

    from harness import ROOT, checkout, current_tree, load, machine, side_by_side

    async with AsyncExitStack() as stack:
        trees = [await stack.enter_async_context(checkout(args.ref)), current_tree()]
        figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        print(f"{machine()}; load before: {load()}", file=sys.stderr)
        for round_ in range(args.rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                python = tree.path / ".venv" / "bin" / "python"
                got = await asyncio.to_thread(run_child, python, tree.path, args.items, args.per_step, False)
                print(f"round {round_ + 1} {tree.label}: {got}", file=sys.stderr)
                for key, value in got.items():
                    figures[tree.label][key].append(value)
        if args.callgrind:
            for tree in trees:
                python = tree.path / ".venv" / "bin" / "python"
                got = await asyncio.to_thread(run_child, python, tree.path, args.callgrind, args.per_step, True)
                print(f"callgrind {tree.label}: {got}", file=sys.stderr)
                for key in ("instructions", "submit_instructions"):
                    figures[tree.label][key].append(got[key])
        print(f"\n{args.items} items, {args.per_step} per step, {args.rounds} rounds; load after: {load()}")
        print(f"run from {ROOT}\n")
        side_by_side([tree.label for tree in trees], ROWS, figures)


if __name__ == "__main__":
    asyncio.run(main())
