"""No request holds up the others: with auth on, a request without a valid key is answered 401 before its body is
read, and large bodies are parsed and validated off the event loop. The API runs as a real `mcp-batch api` process;
the test polls its /healthz while a large request is in flight and keeps the worst answer time."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, ConfigDict, field_validator

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from service.bodies import off_loop
from service.bodies.strict_route import StrictJSONRoute
from tests.support import api_process_handle

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow, pytest.mark.serial]  # its assertions are durations

KEY = "mcpb_body-reading-key"
AUTH = {"authorization": f"Bearer {KEY}"}
HEALTHZ_BUDGET = 0.050  # the worst /healthz answer while a large body is read


@pytest.fixture
async def served(settings: Settings, tmp_path: Path) -> AsyncIterator[tuple[str, int]]:
    """The API process: its base URL and its pid."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"sha256": hash_key(KEY), "tenant": "t", "write": True}]}))
    keyed = settings.model_copy(update={"auth": "keys", "keys": keys, "max_calls_per_batch": 100_000})
    with api_process_handle(keyed, tmp_path) as (base_url, process):
        yield base_url, process.pid


@pytest.fixture
def api(served: tuple[str, int]) -> str:
    return served[0]


@pytest.fixture
def watched(served: tuple[str, int], settings: Settings) -> list[int]:
    """What a /healthz answer waits on: the API process, Redis (it pings it), and this process (it polls)."""
    with redis.Redis.from_url(settings.redis_url) as client:
        redis_pid = int(client.info("server")["process_id"])
    return [served[1], redis_pid, os.getpid()]


@dataclass
class Answer:
    status_code: int
    text: str


async def post(url: str, body: bytes, headers: dict[str, str], tmp_path: Path) -> Answer:
    """POST from a process of its own (curl): sending 10 MiB must not compete with this test's polling."""
    path = tmp_path / "body.json"
    path.write_bytes(body)
    argv = ["curl", "-s", "-o", "-", "-w", "\\n%{http_code}", "-H", "content-type: application/json"]
    argv += [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]
    proc = await asyncio.create_subprocess_exec(*argv, "--data-binary", f"@{path}", url, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    text, _, code = out.decode().rpartition("\n")
    return Answer(int(code), text)


def waited_for_a_cpu(pids: list[int]) -> float:
    """Seconds the threads of these processes have spent runnable but not running (the kernel's run delay, from
    /proc/<pid>/task/<tid>/schedstat; 0 where the kernel keeps none): time a loaded machine kept them off the CPU."""
    total = 0
    for pid in pids:
        with suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with suppress(OSError, IndexError, ValueError):
                    total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
    return total / 1e9


async def worst_healthz(
    base_url: str, watched: list[int], work: Awaitable[Answer] | None = None, seconds: float = 0
) -> tuple[float, Any]:
    """The slowest /healthz answer (seconds) while `work` runs, polling one request after another; without `work`,
    for `seconds` (the machine's own noise). Each answer's time is less what the machine kept the `watched`
    processes waiting for a CPU meanwhile: with more runnable threads than cores, the thread holding the GIL is
    preempted, and the loop waits on it however short the service's own steps are. This process's own collector is
    off meanwhile: a collection here (the test worker holds the collected suite, and the test's bodies) would be timed
    as the service's pause."""
    task = asyncio.ensure_future(work) if work is not None else None
    worst, until = 0.0, time.perf_counter() + seconds
    gc.disable()
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as health:
            await health.get("/healthz")  # the connection is open before timing starts
            while (not task.done()) if task is not None else time.perf_counter() < until:
                started, waited = time.perf_counter(), waited_for_a_cpu(watched)
                assert (await health.get("/healthz")).status_code == 200
                took = time.perf_counter() - started
                worst = max(worst, took - (waited_for_a_cpu(watched) - waited))
    finally:
        gc.enable()
    return worst, (await task if task is not None else None)


async def measured(
    api: str,
    watched: list[int],
    body: bytes,
    headers: dict[str, str],
    tmp_path: Path,
    what: str,
    budget: float = HEALTHZ_BUDGET,
    path: str = "/v1/batches",
) -> Answer:
    """POST the body while polling /healthz; assert the worst answer under 50 ms beyond what the machine itself adds
    over as long with nothing else to do. A loop held by the work answers nothing for most of that time."""
    async with httpx.AsyncClient(base_url=api) as http:  # routes are made at their first request: not measured here
        await http.post("/v1/batches", json={"calls": []}, headers=headers)
    started = time.perf_counter()
    worst, answer = await worst_healthz(api, watched, post(f"{api}{path}", body, headers, tmp_path))
    took = time.perf_counter() - started
    noise, _ = await worst_healthz(api, watched, seconds=min(took, 10))
    print(f"{what}: answered in {took:.2f} s; worst /healthz less CPU waits {worst:.4f} s (idle {noise:.4f} s)")
    assert worst < budget + noise
    return answer


def flat_object_body(size: int) -> bytes:
    """About `size` bytes: one call whose arguments are one object of very many small keys (the costliest shape to
    parse per byte)."""
    pairs = b",".join(b'"k%07d":0' % i for i in range(size // 13))
    return b'{"calls": [{"server": "demo", "tool": "echo", "arguments": {' + pairs + b"}}]}"


def many_calls_body(count: int, message: str = "hello") -> bytes:
    calls = [{"id": f"c{i}", "server": "demo", "tool": "echo", "arguments": {"message": message}} for i in range(count)]
    return json.dumps({"calls": calls}).encode()


async def test_a_request_without_a_valid_key_is_401_before_its_body_is_read(api: str) -> None:
    host, port = api.removeprefix("http://").split(":")
    for authorization in (b"", b"Authorization: Bearer not-a-key\r\n"):
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            head = b"POST /v1/batches HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n" % host.encode()
            writer.write(head + authorization + b"Content-Length: %d\r\n\r\n" % (8 << 20) + b'{"calls": [')
            started = time.perf_counter()
            # Only the start of an 8 MiB body is sent: a server that read it first would never answer.
            async with asyncio.timeout(5):
                status = await reader.readline()
            took = time.perf_counter() - started
        finally:
            writer.close()
            await writer.wait_closed()
        assert status.startswith(b"HTTP/1.1 401"), status
        assert took < 0.5
        print(f"401 after {took * 1000:.1f} ms, the 8 MiB body unread")


async def test_health_routes_and_unknown_paths_need_no_key(api: str) -> None:
    async with httpx.AsyncClient(base_url=api) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/openapi.json")).status_code == 200
        assert (await http.get("/no/such/route")).status_code == 404
        assert (await http.get("/v1/batches")).status_code == 401
        assert (await http.get("/v1/batches", headers=AUTH)).status_code == 200


async def test_an_unauthenticated_10_mib_body_stalls_nothing(api: str, watched: list[int], tmp_path: Path) -> None:
    answer = await measured(api, watched, flat_object_body(10_000_000), {}, tmp_path, "unauthenticated 10 MiB body")
    assert answer.status_code == 401


async def test_a_10_mib_body_is_parsed_off_the_event_loop(api: str, watched: list[int], tmp_path: Path) -> None:
    body = many_calls_body(10_000, "m" * 900)
    assert len(body) > 9 << 20
    answer = await measured(api, watched, body, AUTH, tmp_path, "10 MiB body of 10,000 calls")
    assert answer.status_code == 202, answer.text[:300]


async def test_a_100_000_call_submit_is_validated_off_the_event_loop(
    api: str, watched: list[int], tmp_path: Path
) -> None:
    # Storing 100,000 calls is round trips to Redis on the loop, a chunk each: a looser bound (it was 1-2.5 s).
    answer = await measured(
        api, watched, many_calls_body(100_000), AUTH, tmp_path, "100,000-call submit", 2 * HEALTHZ_BUDGET
    )
    assert answer.status_code == 202, answer.text[:300]


async def test_a_100_000_call_dry_run_is_checked_off_the_event_loop(
    api: str, watched: list[int], tmp_path: Path
) -> None:
    body = many_calls_body(100_000)
    path = "/v1/batches:validate"
    answer = await measured(api, watched, body, AUTH, tmp_path, "100,000-call dry run", 2 * HEALTHZ_BUDGET, path)
    assert answer.status_code == 200, answer.text[:300]
    assert json.loads(answer.text)["valid"] is True


async def test_an_invalid_100_000_call_body_is_422_listing_the_calls_at_fault(api: str) -> None:
    calls: list[dict[str, Any]] = [{"server": "demo", "tool": "echo"} for _ in range(100_000)]
    calls[3]["timeout_seconds"] = -1
    calls[99_998]["extra"] = 1
    body = json.dumps({"calls": calls, "mode": "sideways"}).encode()
    async with httpx.AsyncClient(base_url=api, timeout=60) as http:
        response = await http.post("/v1/batches", content=body, headers={"content-type": "application/json", **AUTH})
    assert response.status_code == 422
    locs = [problem["loc"] for problem in response.json()["detail"]]
    assert locs == [
        ["body", "calls", 3, "timeout_seconds"],
        ["body", "calls", 99_998, "extra"],
        ["body", "mode"],
    ]


class Item(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def _seen(cls, n: int) -> int:  # runs when an Item is validated, not when an instance passes through
        VALIDATED_ON.append(threading.current_thread() is threading.main_thread())
        return n


class Items(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[Item]


VALIDATED_ON: list[bool] = []  # per Item validated: on the event loop's (main) thread?


async def test_a_large_body_is_validated_once_and_off_the_event_loop() -> None:
    """Also the pin on FastAPI: the instance validated in the thread is taken as it is (validated twice, the items
    would be counted twice, the second time on the loop)."""
    router = APIRouter(route_class=StrictJSONRoute)

    @router.post("/items")
    async def count(body: Items) -> int:
        return len(body.items)

    app = FastAPI()
    app.include_router(router)
    VALIDATED_ON.clear()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://app") as http:
        small = await http.post("/items", json={"items": [{"n": 1}]})
        assert small.json() == 1 and VALIDATED_ON == [True]  # a small body: validated on the loop
        VALIDATED_ON.clear()
        large = await http.post("/items", json={"items": [{"n": n} for n in range(20_000)]})
        assert large.json() == 20_000
        assert len(VALIDATED_ON) == 20_000 and not any(VALIDATED_ON)
        invalid = await http.post("/items", json={"items": [{"n": n} for n in range(20_000)] + [{"n": "x"}], "x": 1})
        assert invalid.status_code == 422
        assert [e["loc"] for e in invalid.json()["detail"]] == [["body", "items", 20_000, "n"], ["body", "x"]]


def test_a_large_body_in_hand_pauses_the_collector_and_shortens_the_switch_interval() -> None:
    off_loop._freeing.submit(lambda: None).result(timeout=10)  # an earlier test's body freed: none is in hand
    assert gc.isenabled()
    interval = sys.getswitchinterval()
    with off_loop.collector_paused():
        assert not gc.isenabled() and sys.getswitchinterval() <= 0.001
        with off_loop.collector_paused():
            pass
        assert not gc.isenabled()  # still one body in hand
    assert gc.isenabled() and sys.getswitchinterval() == interval


def test_what_a_body_leaves_is_freed_by_a_thread_of_its_own_the_collector_paused_until_then() -> None:
    value = {"calls": [{"n": n} for n in range(10_000)], "mode": "serial", "few": [1, 2]}
    items = value["calls"]
    freed = threading.Event()
    blocked = off_loop._freeing.submit(freed.wait, 10)  # the freeing thread is busy until `freed` is set
    future = off_loop.drain(value)
    assert future is not None and items == [] and value["few"] == [1, 2]  # emptied at once, short lists kept
    assert not gc.isenabled()
    freed.set()
    blocked.result(timeout=10)
    future.result(timeout=10)
    assert gc.isenabled()
    assert off_loop.drain({"calls": [1, 2, 3]}) is None  # nothing long to free
