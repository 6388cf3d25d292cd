"""Helpers the tests share: starting real backends and the real service, submitting and awaiting batches."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH
from mcp_batch.settings import Settings
from mcp_batch_cli.commands import main
from service.app import create_app
from tests.ports import free_port
from worker.main import Worker, create_worker

TERMINAL = {status.value for status in TERMINAL_BATCH}

T = TypeVar("T")

POLL_SECONDS = 0.02


class Deadline:
    """The one deadline every poll in the tests keeps: `expired()` once `timeout` has passed, and the error naming
    what was awaited."""

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout, self.what = timeout, what
        self.end = time.monotonic() + timeout

    def expired(self) -> bool:
        return time.monotonic() > self.end

    def error(self, last: object = None) -> AssertionError:
        seen = "" if last is None else f" (last seen: {last!r:.300})"
        return AssertionError(f"waited {self.timeout:g} s for {self.what}{seen}")


async def eventually(
    condition: Callable[[], Awaitable[T] | T], *, what: str, timeout: float = 30, interval: float = POLL_SECONDS
) -> T:
    """Poll `condition` (a function, or a coroutine function) until it returns something truthy, and return that;
    fail naming `what` once `timeout` seconds have passed. The way every test waits for a condition."""
    deadline = Deadline(timeout, what)
    while True:
        value = condition()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if deadline.expired():
            raise deadline.error(value)
        await asyncio.sleep(interval)


def eventually_blocking(
    condition: Callable[[], T], *, what: str, timeout: float = 30, interval: float = POLL_SECONDS * 2.5
) -> T:
    """`eventually` for code outside an event loop (a child process starting, a thread's server)."""
    deadline = Deadline(timeout, what)
    while True:
        value = condition()
        if value:
            return value
        if deadline.expired():
            raise deadline.error(value)
        time.sleep(interval)


async def cli(*argv: str) -> int:
    """Run `mcp-batch ARGV` in a thread and return its exit code."""
    try:
        await asyncio.to_thread(main, list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


MCP_BATCH = str(Path(sys.executable).parent / "mcp-batch")  # the installed console script


def command_env(**extra: str) -> dict[str, str]:
    """This environment without the MCP_BATCH_* variables a command reads (the tests' own stay), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_BATCH_") or k.startswith("MCP_BATCH_TEST_")}
    return env | extra


async def run_command(
    *argv: str, env: dict[str, str], stdin: bytes | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """Run `mcp-batch ARGV` as a process of its own: (exit code, stdout, stderr). Forked by this test worker's fork
    server where one runs (tests/backend_forks.py: a cold start imports for a second or more), else the installed
    console script."""
    forks = os.environ.get(FORKS_ENV)
    command = [sys.executable, "-m", "tests.forked_backend", forks, "--mcp-batch"] if forks else [MCP_BATCH]
    process = await asyncio.create_subprocess_exec(
        *command,
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate(stdin)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


FORKS_ENV = "MCP_BATCH_TEST_BACKEND_FORKS"  # the test worker's fork server's socket (tests/backend_forks.py)


def backend_command(*args: str) -> list[str]:
    """The command line of the tests' backend with `args`: forked by this test worker's fork server where one runs
    (the conftest starts it), else a process of its own."""
    forks = os.environ.get(FORKS_ENV)
    if forks:
        return [sys.executable, "-m", "tests.forked_backend", forks, *args]
    return [sys.executable, "-m", "tests.fault_backend", *args]


def stdio_demo(*args: str, **extra: Any) -> dict[str, Any]:
    """A servers-file entry running the demo backend over stdio (with `args`: its test-only options)."""
    command, *argv = backend_command(*args)
    return {"command": command, "args": argv, **extra}


@dataclass
class HttpBackendProcess:
    """The demo backend over streamable HTTP, as a child process."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


def spawn_http_backend(extra_args: Sequence[str] = (), env: dict[str, str] | None = None) -> HttpBackendProcess:
    """Start the demo backend over HTTP (with `extra_args`, e.g. `--require-token`, and `env` added to this process's
    environment, e.g. OTEL_* variables) without waiting for it: `ready` waits."""
    port = free_port()
    cmd = backend_command("--transport", "http", "--port", str(port), *extra_args)
    environ = {**os.environ, **(env or {})}
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environ)
    return HttpBackendProcess(process, port)


def ready(backend: HttpBackendProcess, timeout: float = 30.0) -> HttpBackendProcess:
    """`backend` once it accepts connections; killed if it does not in time."""

    def listening() -> bool:
        if backend.process.poll() is not None:
            raise RuntimeError(f"demo HTTP backend exited with {backend.process.returncode}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", backend.port)) == 0

    try:
        eventually_blocking(listening, what="the demo HTTP backend's port", timeout=timeout)
    except BaseException:
        backend.stop()
        raise
    return backend


def start_http_backend(
    timeout: float = 30.0, extra_args: Sequence[str] = (), env: dict[str, str] | None = None
) -> HttpBackendProcess:
    """Start the demo backend over HTTP and return once it accepts connections."""
    return ready(spawn_http_backend(extra_args, env), timeout)


@pytest.fixture(name="servers")
def counted_servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    """The suite's servers plus `counted`, a backend of the test's own (import it into a module to use it there)."""
    servers["counted"] = {"url": fresh_backend.url}
    return servers


@dataclass
class ServiceHandle:
    base_url: str
    settings: Settings
    worker: Worker | None


@asynccontextmanager
async def running_api(settings: Settings, port: int | None = None) -> AsyncIterator[str]:
    """The API alone on a real port (`port`, or a free one), in this event loop (workers run elsewhere); its base
    URL."""
    port = port or free_port()
    # A connection left open (a stream, a long poll) must not hold a test's teardown: close it after 5 s.
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    api_task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started or api_task.done(), what="uvicorn started", timeout=20)
        if api_task.done():
            api_task.result()  # its start-up failed: say why
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await api_task


STOP_SECONDS = 30.0  # a worker's stop waits for its sessions (10 s at most each) and its jobs' hand-back


async def stopped(worker: Worker, worker_task: asyncio.Task[None]) -> None:
    """Stop an in-loop worker; one that does not stop in time fails the test showing what every task waits on."""
    worker_task.cancel()
    try:
        async with asyncio.timeout(STOP_SECONDS):
            await asyncio.wait({worker_task})  # not `await worker_task` in suppress(): that would hide the timeout
            await worker.close()
    except TimeoutError:
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            task.print_stack(limit=12, file=stacks)
        said = f"the worker did not stop within {STOP_SECONDS:g} s; its tasks:\n{stacks.getvalue()}"
        raise AssertionError(said) from None
    if not worker_task.cancelled():
        worker_task.result()  # the worker's own failure, if it had one


@asynccontextmanager
async def running_service(settings: Settings, port: int | None = None) -> AsyncIterator[ServiceHandle]:
    """The API on a real port (`port`, or a free one) and one arq worker, both in this event loop, once the worker's
    start-up is done (a test that stops Redis next must not catch it half started); stopped on exit."""
    async with running_api(settings, port) as base_url, running_worker(settings) as worker:
        yield ServiceHandle(base_url, settings, worker)


@asynccontextmanager
async def running_worker(settings: Settings) -> AsyncIterator[Worker]:
    """One arq worker in this event loop, returned once its start-up is done (its first heartbeat sent)."""
    worker = create_worker(settings, handle_signals=False)
    worker_task = asyncio.create_task(worker.async_run())
    try:
        # arq offers no start event to await
        await eventually(lambda: "state" in worker.ctx or worker_task.done(), what="the worker's start-up", timeout=20)
        if worker_task.done():
            worker_task.result()
        yield worker
    finally:
        await stopped(worker, worker_task)


async def submit(client: httpx.AsyncClient, calls: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    """POST a batch and return its document; fails the test unless it was accepted."""
    response = await client.post("/v1/batches", json={"calls": calls, **options})
    assert response.status_code == 202, response.text
    document: dict[str, Any] = response.json()
    return document


async def finished(client: httpx.AsyncClient, batch_id: str, timeout: float = 60) -> dict[str, Any]:
    """Long-poll until the batch is terminal (woken by the service, not by polling here)."""

    async def terminal() -> dict[str, Any] | None:
        response = await client.get(f"/v1/batches/{batch_id}", params={"wait": 30})
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        return document if document["status"] in TERMINAL else None

    # each GET waits for the batch's end, so nothing sits between them
    async with asyncio.timeout(timeout):
        return await eventually(terminal, what=f"batch {batch_id} ended", timeout=timeout, interval=0)


async def run_batch(client: httpx.AsyncClient, calls: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    """Submit a batch and return its final document."""
    return await finished(client, (await submit(client, calls, **options))["id"])


async def succeeded(client: httpx.AsyncClient, batch_id: str) -> int:
    """How many of the batch's items have ended `ok` so far (its document's counts, without results)."""
    response = await client.get(f"/v1/batches/{batch_id}", params={"limit": 0})
    assert response.status_code == 200, response.text
    count: int = response.json()["counts"]["succeeded"]
    return count


async def until_succeeded(client: httpx.AsyncClient, batch_id: str, count: int, timeout: float = 30) -> None:
    """Until `count` of the batch's items have succeeded: partial progress has no event to wait on, so poll."""

    async def progressed() -> bool:
        return await succeeded(client, batch_id) >= count

    await eventually(progressed, what=f"{count} items of batch {batch_id} succeeded", timeout=timeout)


def by_id(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in document["results"]}


async def all_results(client: httpx.AsyncClient, batch_id: str) -> list[dict[str, Any]]:
    """Every item of a batch in index order, page by page."""
    items: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        response = await client.get(f"/v1/batches/{batch_id}", params={"offset": offset, "limit": 1000})
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["results"]
        offset = page["next_offset"]
    return items


def _process_table() -> dict[int, tuple[int, str]]:
    """Every process's parent and start time (clock ticks since boot), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                table[int(entry.name)] = (int(fields[1]), fields[19])  # ppid, starttime
    return table


def crash(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker process, as a crash, then the backends it had started: a crash leaves them to the machine,
    and a stdio server that ignores its input closing (server-everything) would outlive the test run."""
    table, left, seen = _process_table(), {}, [proc.pid]
    while seen:
        parent = seen.pop()
        for pid, (ppid, started) in table.items():
            if ppid == parent:
                left[pid] = started
                seen.append(pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    now = _process_table()
    for pid, started in left.items():
        if pid in now and now[pid][1] == started:  # the same process, not a later one given its pid
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def worker_id(proc: subprocess.Popen[bytes]) -> str:
    """The worker id a worker process records on the items it runs."""
    return f"{socket.gethostname()}:{proc.pid}"


@contextmanager
def worker_processes(
    settings: Settings, count: int, tmp: Path, env: dict[str, str] | None = None
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` real `mcp-batch worker` processes for these settings (and `env`, e.g. OTEL_* variables), each ready
    before this returns."""
    env = {**os.environ, **settings_env(settings), **(env or {})}
    procs, logs = [], []
    try:
        for n in range(count):
            log = tmp / f"worker-{n}.log"
            logs.append(log)
            with log.open("wb") as out:
                argv = [sys.executable, "-c", "from mcp_batch_cli.commands import main; main()", "worker"]
                procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, env=env))

        def ready() -> bool:  # a child process starting: nothing to wait on but its log
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker exited: " + " | ".join(log.read_text()[-500:] for log in logs))
            return all("ready for" in log.read_text() for log in logs)

        eventually_blocking(ready, what="the workers' start-up lines", timeout=30)
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def api_process(settings: Settings, tmp: Path) -> Iterator[str]:
    """A real `mcp-batch api` process for these settings, its base URL once /healthz answers."""
    with api_process_handle(settings, tmp) as (base_url, _):
        yield base_url


@contextmanager
def api_process_handle(settings: Settings, tmp: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real `mcp-batch api` process for these settings: its base URL once /healthz answers, and the process."""
    port = free_port()
    log = tmp / "api.log"
    env = {**os.environ, **settings_env(settings)}
    argv = [sys.executable, "-c", "from mcp_batch_cli.commands import main; main()", "api", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out, env=env)
    base_url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:  # a child process starting: nothing to wait on but its port
            if proc.poll() is not None:
                raise RuntimeError("the API exited: " + log.read_text()[-1000:])
            with suppress(httpx.TransportError):
                return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
            return False

        eventually_blocking(healthy, what="the API process's /healthz", timeout=30)
        yield base_url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as MCP_BATCH_* variables, for child processes (lists as JSON, secrets revealed, None left out)."""
    env = {}
    for name, value in settings.model_dump().items():
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif isinstance(value, list | dict):
            value = json.dumps(value)
        if value is not None:
            env[f"MCP_BATCH_{name.upper()}"] = str(value)
    return env


async def call_backend(url: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call a backend directly (not through the service), e.g. to read its stats."""
    async with Client(url) as client:
        content = (await client.call_tool(tool, arguments or {})).structured_content
        return content["result"] if isinstance(content, dict) and set(content) == {"result"} else content


async def until_at_backend(backend: HttpBackendProcess, field: str, count: int, timeout: float = 30) -> None:
    """Until the backend's `stats` show `count` entries under `field` (`arrivals` of stamps, `tallies`): only the
    backend knows what reached it."""

    async def reached() -> bool:
        return len((await call_backend(backend.url, "stats"))[field]) >= count

    await eventually(reached, what=f"{count} {field} at the backend", timeout=timeout)


async def not_stored(redis: Any, batch_id: str) -> bool:
    """Whether the batch's hash is gone from Redis (expired on Redis's own clock, or removed)."""
    return not await redis.exists(Keys().batch(batch_id))


async def live_workers(redis: Any, count: int) -> None:
    """Wait until `count` workers have sent a heartbeat (sharding counts the live ones)."""

    async def beating() -> bool:
        return int(await redis.zcard("mcpb:workers")) >= count

    await eventually(beating, what=f"{count} workers' heartbeats")


def most_in_window(times: list[float], window: float) -> int:
    """The most arrival times that fall within any span of `window` seconds."""
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times))


def stamps(server: str, n: int, seconds: float = 0.0) -> list[dict[str, Any]]:
    """`n` calls of the demo backend's `stamp` tool (it records each arrival and the calls in flight)."""
    return [{"server": server, "tool": "stamp", "arguments": {"seconds": seconds}} for _ in range(n)]


def metric_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus scrape, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample of a scrape (None when it is absent)."""
    return metric_samples(text).get((name, frozenset(labels.items())))
