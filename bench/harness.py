"""Run the service as processes, the way production does, with no import of the project's own modules.

A benchmark drives a tree (a checkout with its `.venv`) only through its console command (`mcp-batch api`,
`mcp-batch worker`), its environment variables and its HTTP API, so the same harness measures any commit: the
current tree and an older one side by side. Linux only: CPU times come from /proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

WORKERS_KEY = "mcpb:workers"  # the heartbeat zset under the default key prefix
ROOT = Path(__file__).resolve().parent.parent  # the tree this benchmark runs from
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    """Await `check()` until it is true; start-up errors meanwhile count as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(Exception):
            if await check():
                return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{what}: not ready after {timeout:.0f} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (its own threads, not its children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children(pid: int) -> set[int]:
    """The direct children of a process (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(OSError):
            found.update(int(p) for p in (task / "children").read_text().split())
    return found


def descendants(pid: int) -> set[int]:
    todo, found = [pid], set()
    while todo:
        for child in children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@dataclass(frozen=True)
class Tree:
    """A checkout of the project with its virtualenv: `label` names it in the printout."""

    label: str
    path: Path

    @property
    def command(self) -> str:
        return str(self.path / ".venv" / "bin" / "mcp-batch")


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def current_tree(label: str = "after") -> Tree:
    dirty = " + uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return Tree(f"{label} ({git('rev-parse', '--short', 'HEAD')}{dirty})", ROOT)


@asynccontextmanager
async def checkout(ref: str) -> AsyncIterator[Tree]:
    """`ref` checked out in a temporary worktree with its locked dependencies; removed on exit."""
    commit = git("rev-parse", "--short", f"{ref}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="mcp-batch-ref-") as tmp:
        path = Path(tmp) / "tree"
        git("worktree", "add", "--detach", str(path), ref)
        try:
            await asyncio.to_thread(
                subprocess.run, ["uv", "sync", "--frozen", "--quiet"], cwd=path, check=True, env=clean_env()
            )
            yield Tree(commit if commit.startswith(ref) else f"{ref} ({commit})", path)
        finally:
            git("worktree", "remove", "--force", str(path))


def clean_env() -> dict[str, str]:
    """This process's environment without MCP_BATCH_* or a virtualenv of its own, so a stack gets only ours."""
    drop = ("MCP_BATCH_", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def callgrind_argv(workdir: Path) -> list[str]:
    """valgrind's callgrind, to run a server under: it counts nothing until told to (`instrument`), and writes its
    counts to `workdir`."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={workdir / 'callgrind.out'}"]


async def instrument(pid: int, state: str) -> None:
    """Callgrind's counting in a server on or off, or `dump`: what it counted so far to a file of its own
    (callgrind.out.1 for the first), the count starting again from zero."""
    argv = ["callgrind_control", "-d" if state == "dump" else "-i", *([] if state == "dump" else [state]), str(pid)]
    await asyncio.to_thread(subprocess.run, argv, check=True, capture_output=True)


def callgrind_total(workdir: Path, name: str = "callgrind.out") -> int:
    """Instructions counted in a dump (callgrind writes the last when the server exits; its header's summary is 0)."""
    totals = [line for line in (workdir / name).read_text().splitlines() if line.startswith("totals:")]
    return int(totals[-1].split()[1])


@asynccontextmanager
async def redis_server(workdir: Path, callgrind: bool = False) -> AsyncIterator[tuple[str, int]]:
    """A private redis-server on a free port (under callgrind, counting nothing until told): (URL, pid)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv = [*callgrind_argv(workdir), *argv] if callgrind else argv
    proc = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
    try:
        client = aioredis.Redis(port=port)
        await wait_until(client.ping, 60 if callgrind else 10, "redis-server")
        await client.aclose()
        yield f"redis://127.0.0.1:{port}/0", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class Stack:
    """One tree's service running as processes on its own Redis."""

    tree: Tree
    http: httpx.AsyncClient
    redis: aioredis.Redis
    redis_url: str
    api_pid: int
    worker_pids: list[int]
    logs: Path
    redis_pid: int

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for log in sorted(self.logs.glob("*.log")):
            out.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)


def _spawn(tree: Tree, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([tree.command, *args], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then a bounded wait; a worker's stdio backends that outlive it are ended by pid."""
    leftovers = {pid for proc in procs for pid in descendants(proc.pid)}
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for pid in leftovers:
        with suppress(ProcessLookupError):
            os.kill(pid, 15)


@asynccontextmanager
async def service_stack(
    tree: Tree, servers: dict[str, Any], workers: int, settings: dict[str, str] | None = None, callgrind: bool = False
) -> AsyncIterator[Stack]:
    """A private Redis (`callgrind`: under callgrind, its files in the stack's `logs`), `mcp-batch api` and `workers` x
    `mcp-batch worker` of `tree`; yields once the API answers /healthz and every worker beats. `settings` are extra
    MCP_BATCH_* variables."""
    async with AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-bench-")))
        redis_url, redis_pid = await stack.enter_async_context(redis_server(tmp, callgrind))
        (tmp / "servers.json").write_text(json.dumps(servers))
        env = clean_env() | {
            "MCP_BATCH_REDIS_URL": redis_url,
            "MCP_BATCH_SERVERS": str(tmp / "servers.json"),
            "MCP_BATCH_AUTH": "none",  # a private stack on loopback
            "MCP_BATCH_WORKER_METRICS_PORT": "0",  # several stacks on one machine: no port to fight over
        }
        env.update(settings or {})
        port = free_port()
        procs = [_spawn(tree, ["api", "--port", str(port)], env, tmp / "api.log")]
        procs += [_spawn(tree, ["worker"], env, tmp / f"worker-{i}.log") for i in range(workers)]
        stack.callback(_stop, procs)
        redis = aioredis.Redis.from_url(redis_url)
        stack.push_async_callback(redis.aclose)
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600))
        result = Stack(tree, http, redis, redis_url, procs[0].pid, [p.pid for p in procs[1:]], tmp, redis_pid)

        async def healthy() -> bool:
            return (await http.get("/healthz")).status_code == 200

        async def beating() -> bool:
            return int(await redis.zcard(WORKERS_KEY)) >= workers

        try:
            await wait_until(healthy, 60, f"{tree.label}: api")
            await wait_until(beating, 60, f"{tree.label}: workers")
        except TimeoutError:
            print(result.log_tail(), file=sys.stderr)
            raise
        yield result


async def run_batch(http: httpx.AsyncClient, calls: list[dict[str, Any]], concurrency: int) -> tuple[float, Any]:
    """Seconds from POST to the completed document of one batch (read with ?wait), and that document."""
    start = time.perf_counter()
    response = await http.post("/v1/batches", json={"calls": calls, "max_concurrency": concurrency})
    response.raise_for_status()
    batch_id = response.json()["id"]
    while True:
        document = (await http.get(f"/v1/batches/{batch_id}", params={"wait": 60, "limit": 1})).json()
        if document["status"] in ("completed", "cancelled", "expired"):
            elapsed = time.perf_counter() - start
            if document["counts"]["succeeded"] != len(calls):
                raise RuntimeError(f"batch {batch_id} ended {document['status']}: {document['counts']}")
            return elapsed, document


async def redis_cpu(redis: aioredis.Redis) -> float:
    info = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def command_calls(redis: aioredis.Redis) -> dict[str, int]:
    """Calls per command so far (INFO commandstats), without this harness's own INFO."""
    stats = await redis.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}
    calls.pop("info", None)
    return calls


def version_of(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "n/a"


def machine() -> str:
    redis = version_of("redis-server", "--version").split(" sha=")[0].removeprefix("Redis server ")
    return (
        f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, Python {platform.python_version()}, "
        f"redis-server {redis}, node {version_of('node', '--version')}"
    )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


Row = tuple[str, str, str]  # (title, figure's key, format)


def side_by_side(labels: list[str], rows: list[Row], figures: dict[str, dict[str, list[float]]]) -> None:
    """A Markdown table: one column per tree (medians), then the last tree over each earlier one."""
    ratios = [f"{labels[-1].split()[0]}/{label.split()[0]}" for label in labels[:-1]]
    print("| figure | " + " | ".join(labels + ratios) + " |")
    print("|---" * (1 + len(labels) + len(ratios)) + "|")
    for title, key, fmt in rows:
        values = [statistics.median(figures[label][key]) if figures[label].get(key) else None for label in labels]
        cells = ["-" if v is None else fmt.format(v) for v in values]
        last = values[-1]
        cells += ["-" if not v or last is None else f"{last / v:.2f}" for v in values[:-1]]
        print(f"| {title} | " + " | ".join(cells) + " |")
