"""Real resources for the tests: a Redis database emptied before each test, the demo backend as real processes
over stdio and streamable HTTP, and the service itself (uvicorn on a real port, an arq worker in the loop).

The suite runs in parallel (pytest-xdist, `-n auto` in pyproject, two workers more than the cores): each xdist worker
is a process with its own session fixtures (backends on free ports) and its own Redis database, counted down from
the one `MCP_BATCH_TEST_REDIS_URL` names. A test marked `serial` runs in the one group that never runs two at a
time."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.oidc_provider import OidcProvider
from tests.redis_server import RedisServer
from tests.suite_redis import DEFAULT_URL, URL_ENV, SuiteRedis, choose
from tests.support import (
    FORKS_ENV,
    HttpBackendProcess,
    ServiceHandle,
    eventually_blocking,
    ready,
    running_service,
    spawn_http_backend,
    start_http_backend,
    stdio_demo,
)


def worker_redis_url(base: str, worker: str) -> str:
    """The database of xdist worker `worker` (gw0, gw1, ...; the base's own for gw0 and for a run without xdist):
    the base's number less the worker's, so each worker empties only its own."""
    parts = urllib.parse.urlsplit(base)
    number = int(parts.path.strip("/") or 0) - int(worker.removeprefix("gw"))
    if number < 0:
        raise pytest.UsageError(
            f"MCP_BATCH_TEST_REDIS_URL names database {parts.path.strip('/') or 0}: too low for test worker {worker} "
            "(each worker takes the next lower number); name a higher database or run fewer workers (-n)"
        )
    return urllib.parse.urlunsplit(parts._replace(path=f"/{number}"))


def _this_workers_url() -> str:
    return worker_redis_url(os.environ.get(URL_ENV, DEFAULT_URL), os.environ.get("PYTEST_XDIST_WORKER", "gw0"))


# Hypothesis's wall-clock checks (a 200 ms deadline per example, "data generation is extremely slow") measure how
# busy the machine is, not the code: on 2 loaded cores they fail a sound test now and then. Example counts stay.
hypothesis.settings.register_profile("suite", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("suite")

# The suite keeps its bytecode even where PYTHONDONTWRITEBYTECODE is set (it is on some CI machines): otherwise every
# test worker compiles and assertion-rewrites the test modules anew, and every Python process a test starts (API,
# worker, CLI) compiles the project and its libraries from source; together about a tenth of the run's CPU.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

REDIS_URL = _this_workers_url()  # an xdist worker's is final here; the controller's is set again at configure
_suite_redis = pytest.StashKey[SuiteRedis]()


def pytest_configure(config: pytest.Config) -> None:
    """The run's Redis, chosen once (tests/suite_redis.py) by the process that runs pytest; its workers inherit it."""
    global REDIS_URL
    if hasattr(config, "workerinput"):
        return
    chosen = choose(dict(os.environ))
    config.stash[_suite_redis] = chosen
    os.environ[URL_ENV] = chosen.url
    REDIS_URL = _this_workers_url()


def pytest_unconfigure(config: pytest.Config) -> None:
    chosen = config.stash.get(_suite_redis, None)
    if chosen is not None:
        chosen.stop()


def pytest_collection_finish(session: pytest.Session) -> None:
    """The collected suite (modules, items, fixtures: about 340,000 objects in a test worker) is moved out of the
    collector's reach: a full collection over it took 150 ms, long enough to land inside a test's timed window as a
    pause the service never made; frozen, one takes microseconds."""
    gc.collect()
    gc.freeze()


def pytest_report_header(config: pytest.Config) -> str | None:
    chosen = config.stash.get(_suite_redis, None)
    return None if chosen is None else f"redis: {chosen.description}"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two test workers more than the cores. The tests spend a good part of their time waiting on other
    processes, sockets and timers (three workers on 2 cores used 354 s of CPU in a 296 s run), so more workers fill
    the gaps (four: 280 s); at most 16, one Redis database each."""
    return min((os.cpu_count() or 1) + 2, 16)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`serial` tests share one xdist group (`--dist loadgroup`), so no two of them ever run at the same time; every
    test has a node id of its own, which is how xdist hands tests to its workers; and `slow` tests (and the serial
    group) come first, so the run does not end on one worker finishing a long test while the others wait."""
    for item in items:
        if item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.xdist_group("serial"))
    items.sort(key=lambda item: (not item.get_closest_marker("serial"), not item.get_closest_marker("slow")))
    twice = [nodeid for nodeid, count in Counter(item.nodeid for item in items).items() if count > 1]
    if twice:
        raise pytest.UsageError(f"tests share a node id, so a parallel run would skip all but one: {twice[:3]}")


@pytest.fixture(autouse=True)
def collected() -> Iterator[None]:
    """Each test's garbage is collected as it ends: a connection or stream it left open is reported (as an error, a
    ResourceWarning) at its own teardown, not at whichever later test the collector happened to run in."""
    yield
    gc.collect()


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    """The test database, emptied before each test."""
    client = aioredis.Redis.from_url(REDIS_URL)
    await client.flushdb()
    yield client
    await client.aclose()


@pytest.fixture
async def own_redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A Redis server of this test's own (either engine), for what the shared one cannot give: server-wide figures
    (command counts, memory) that no other worker's tests disturb, or a Redis to stop."""
    server = RedisServer(tmp_path / "redis")
    await server.start()
    yield server
    await server.stop(signal.SIGKILL)


@pytest.fixture(scope="session", autouse=True)
def backend_forks() -> Iterator[None]:
    """This test worker's fork server for the tests' backend (tests/backend_forks.py): each backend a test starts
    is forked from a process that imported the MCP SDK once, not started cold."""
    path = str(Path(tempfile.mkdtemp(prefix="mcpb-forks-")) / "socket")  # a Unix socket path: at most 107 bytes
    server = subprocess.Popen([sys.executable, "-m", "tests.backend_forks", path], stdin=subprocess.PIPE)

    def listening() -> bool:
        if server.poll() is not None:
            raise RuntimeError(f"the backends' fork server exited with {server.returncode}")
        return os.path.exists(path)

    eventually_blocking(listening, what="the backends' fork server", timeout=60)
    os.environ[FORKS_ENV] = path
    yield
    del os.environ[FORKS_ENV]
    assert server.stdin is not None
    server.stdin.close()  # it kills what it still runs, and ends
    server.wait(30)
    shutil.rmtree(Path(path).parent, ignore_errors=True)


@pytest.fixture(scope="session")
def http_backend() -> Iterator[HttpBackendProcess]:
    """The demo backend over streamable HTTP, one process for the session."""
    backend = start_http_backend()
    yield backend
    backend.stop()


@pytest.fixture(scope="session")
def spare_backends() -> Iterator[list[HttpBackendProcess]]:
    """The next test's fresh backend, started while this test runs (a process's start-up is a second or more)."""
    spares = [spawn_http_backend()]
    yield spares
    for spare in spares:
        spare.stop()


@pytest.fixture
def fresh_backend(spare_backends: list[HttpBackendProcess]) -> Iterator[HttpBackendProcess]:
    """A demo HTTP backend of this test's own: its tallies (stats) count only this test's calls."""
    backend = ready(spare_backends.pop())
    spare_backends.append(spawn_http_backend())
    yield backend
    backend.stop()


@pytest.fixture(scope="session")
def oidc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """A real authorization server (oidc-provider) for the session; a test that rotates its keys starts its own."""
    provider = OidcProvider(tmp_path_factory.mktemp("oidc")).start()
    yield provider
    provider.stop()


@pytest.fixture
def servers(tmp_path: Path, http_backend: HttpBackendProcess) -> dict[str, Any]:
    """The servers a test's service uses; a test may add to it before starting the service."""
    return {
        "demo": stdio_demo(),
        "demo_http": {"url": http_backend.url},
        "quick": stdio_demo(timeout_seconds=1),
    }


@pytest.fixture
def settings(tmp_path: Path, servers: dict[str, Any], redis: aioredis.Redis) -> Settings:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    # worker_metrics_port=0: a test that reads a worker's metrics gives it a free port of its own; warm_sessions off:
    # a test's worker opens the sessions its calls need, not one per configured backend (a test turns it on)
    return Settings(
        redis_url=REDIS_URL,
        servers=path,
        worker_idle_poll_seconds=30,
        auth="none",
        worker_metrics_port=0,
        warm_sessions=False,
    )


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[ServiceHandle]:
    """API + one worker against the test Redis."""
    async with running_service(settings) as handle:
        yield handle


@pytest.fixture
async def client(service: ServiceHandle) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=service.base_url, timeout=90) as http:
        yield http
