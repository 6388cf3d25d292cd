"""The MCP client's own CPU per call over each transport, on this tree: the SDK's stdio client, this project's stdio
transport (mcp_batch/backends/stdio.py), and the SDK's streamable HTTP client; the same session on top of each.

    uv run python bench/transport.py [--calls 2000] [--concurrency 8] [--rounds 4]

The backend is the demo backend (`mcp-batch demo-backend`), over stdio and over HTTP, its `echo` tool the call: the
same server code behind both, so the client's CPU per call differs by the transport alone. Each round measures
every transport once, the order rotating from round to round; this process runs on uvloop, as the worker does, and
its CPU (time.process_time) is the client's. Unlike the other benchmarks this one imports this tree's modules: it
compares transports within one tree, not trees. Medians over the rounds, with the lowest and highest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import uvloop
from harness import ROOT, free_port, load, machine, wait_until  # the script's own folder is on sys.path
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcp_batch.backends.stdio import StdioTransport
from mcp_batch.backends.stdio_pipes import StdioProbe

DEMO = [sys.executable, "-c", "from demo.server import main; main()"]


def sdk_stdio(url: str) -> Any:
    return stdio_client(StdioServerParameters(command=DEMO[0], args=DEMO[1:], cwd=ROOT), errlog=open(os.devnull, "w"))


def lean_stdio(url: str) -> Any:
    return StdioTransport(DEMO[0], DEMO[1:], {}, ROOT, StdioProbe(), open(os.devnull, "w"))


def sdk_http(url: str) -> Any:
    return streamable_http_client(url)


TRANSPORTS: dict[str, Callable[[str], Any]] = {"SDK stdio": sdk_stdio, "lean stdio": lean_stdio, "SDK HTTP": sdk_http}


@asynccontextmanager
async def http_backend() -> AsyncIterator[str]:
    port = free_port()
    argv = [*DEMO, "--transport", "http", "--port", str(port)]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient() as http:

            async def up() -> bool:
                await http.get(url.replace("/mcp", "/"))
                return True

            await wait_until(up, 30, "the demo backend over HTTP")
        yield url
    finally:
        process.terminate()
        process.wait(10)


async def per_call(transport: AbstractAsyncContextManager[Any], calls: int, concurrency: int) -> tuple[float, float]:
    """µs of this process's CPU per call, and calls per second."""
    async with Client(transport, cache=None) as client:
        await client.call_tool("echo", {"message": "warm-up"})
        todo = iter(range(calls))

        async def lane() -> None:
            for i in todo:
                result = await client.session.call_tool("echo", {"message": f"m{i}"})
                assert not result.is_error

        cpu, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
        return (time.process_time() - cpu) / calls * 1e6, calls / seconds


async def main(args: argparse.Namespace) -> None:
    cpu: dict[str, list[float]] = {name: [] for name in TRANSPORTS}
    rate: dict[str, list[float]] = {name: [] for name in TRANSPORTS}
    names = list(TRANSPORTS)
    async with http_backend() as url:
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                micro, per_second = await per_call(TRANSPORTS[name](url), args.calls, args.concurrency)
                cpu[name].append(micro)
                rate[name].append(per_second)
            print(f"round {r + 1}/{args.rounds} done, load average {load()}", file=sys.stderr)
    print(machine())
    print(f"{args.calls} echo calls at concurrency {args.concurrency}, {args.rounds} rounds, the demo backend\n")
    print("| transport | client CPU µs/call, median (low-high) | calls/s, median (low-high) | CPU / SDK stdio |")
    print("|---|---|---|---|")
    base = statistics.median(cpu["SDK stdio"])
    for name in names:
        c, s = cpu[name], rate[name]
        print(
            f"| {name} | {statistics.median(c):.0f} ({min(c):.0f}-{max(c):.0f}) "
            f"| {statistics.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {statistics.median(c) / base:.2f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    uvloop.run(main(parser.parse_args()))
