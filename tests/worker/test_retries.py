"""Transient backend failures, through the real service: a read-only or idempotent call is sent again after a
backoff (a 429 no sooner than its Retry-After); a write, a timeout, a tool error or another 4xx is sent once.

The faults are real: an HTTP backend answering 5xx or 429 (its `fail_next` and `refuse_next`), a stdio backend that
dies mid-call or prints garbage on stdout. What the backend saw is read from the backend itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import HttpBackendProcess, by_id, call_backend, run_batch, stdio_demo

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def servers(servers: dict[str, Any], request: pytest.FixtureRequest) -> dict[str, Any]:
    servers["noisy"] = stdio_demo("--garbage-stdout")
    if "fresh_backend" in request.fixturenames:  # an HTTP backend of the test's own, only where one is used
        url = request.getfixturevalue("fresh_backend").url
        servers["flaky"] = {"url": url}
        servers["slow"] = {"url": url, "timeout_seconds": 1}
    return servers


def stamp(server: str, item_id: str = "stamp") -> dict[str, Any]:
    return {"id": item_id, "server": server, "tool": "stamp"}


async def test_a_read_only_call_answered_500_then_200_succeeds_on_its_second_attempt(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    await call_backend(fresh_backend.url, "fail_next", {"count": 1, "status": 500})
    document = await run_batch(client, [stamp("flaky")])
    item = by_id(document)["stamp"]
    assert document["ok"] is True
    assert item["status"] == "ok" and item["attempts"] == 2 and "error" not in item
    seen = await call_backend(fresh_backend.url, "stats")
    assert len(seen["faulted"]) == 1 and seen["arrivals"] == [item["structured_content"]["result"]]
    assert seen["arrivals"][0] > seen["faulted"][0]


async def test_a_write_answered_500_is_sent_once(client: httpx.AsyncClient, fresh_backend: HttpBackendProcess) -> None:
    await call_backend(fresh_backend.url, "fail_next", {"count": 1, "status": 500})
    calls = [{"id": "write", "server": "flaky", "tool": "write", "arguments": {"key": "k1", "value": "v"}}]
    document = await run_batch(client, calls, read_only=False)
    item = by_id(document)["write"]
    assert item["status"] == "error" and item["attempts"] == 1
    assert item["error"] == {
        "code": "backend_error",
        "message": "'flaky' answered HTTP 500",
        "type": "backend",
        "details": {"attempts": 1},
    }
    seen = await call_backend(fresh_backend.url, "stats")
    assert len(seen["faulted"]) == 1 and seen["writes"] == []  # the one send was failed; nothing was sent again


async def test_a_call_answered_500_every_time_fails_after_max_attempts(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    await call_backend(fresh_backend.url, "fail_next", {"count": 10, "status": 503})
    document = await run_batch(client, [stamp("flaky")])
    item = by_id(document)["stamp"]
    assert item["status"] == "error" and item["attempts"] == 3
    assert item["error"] == {
        "code": "backend_error",
        "message": "'flaky' answered HTTP 503",
        "type": "backend",
        "details": {"attempts": 3},
    }
    seen = await call_backend(fresh_backend.url, "stats")
    assert len(seen["faulted"]) == 3 and seen["arrivals"] == []


async def test_a_4xx_other_than_429_is_not_retried(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    await call_backend(fresh_backend.url, "fail_next", {"count": 10, "status": 400})
    document = await run_batch(client, [stamp("flaky")])
    item = by_id(document)["stamp"]
    assert item["status"] == "error" and item["attempts"] == 1
    assert item["error"] == {
        "code": "backend_error",
        "message": "'flaky' answered HTTP 400",
        "type": "backend",
        "details": None,
    }
    assert len((await call_backend(fresh_backend.url, "stats"))["faulted"]) == 1


async def test_a_429_is_retried_no_sooner_than_its_retry_after(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    await call_backend(fresh_backend.url, "refuse_next", {"count": 1, "retry_after": 1})
    document = await run_batch(client, [stamp("flaky")])
    item = by_id(document)["stamp"]
    assert item["status"] == "ok" and item["attempts"] == 2 and "error" not in item
    seen = await call_backend(fresh_backend.url, "stats")
    assert len(seen["faulted"]) == 1 and len(seen["arrivals"]) == 1
    assert seen["arrivals"][0] - seen["faulted"][0] >= 1.0  # measured at the backend: refused, then the retry


async def test_a_429_on_every_attempt_ends_backend_rate_limited(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    await call_backend(fresh_backend.url, "refuse_next", {"count": 10, "retry_after": 0.1})
    document = await run_batch(client, [stamp("flaky")])
    item = by_id(document)["stamp"]
    assert item["status"] == "error" and item["attempts"] == 3
    assert item["error"] == {
        "code": "backend_rate_limited",
        "message": "'flaky' refused the call (HTTP 429)",
        "type": "rate_limit",
        "details": {"retry_after": 0.1, "attempts": 3},
    }


async def test_a_read_only_call_whose_stdio_backend_dies_is_sent_again_on_a_fresh_process(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    calls = [
        {"id": "before", "server": "demo", "tool": "stats"},
        {"id": "crash", "server": "demo", "tool": "crash", "arguments": {"once": str(tmp_path / "crashed")}},
        {"id": "after", "server": "demo", "tool": "stats"},
    ]
    document = await run_batch(client, calls, mode="serial")
    items = by_id(document)
    assert document["ok"] is True
    assert items["before"]["attempts"] == 1 and items["after"]["attempts"] == 1
    assert items["crash"]["attempts"] == 2 and items["crash"]["content"][0]["text"] == "still alive"
    assert items["before"]["structured_content"]["pid"] != items["after"]["structured_content"]["pid"]


async def test_read_only_calls_in_flight_when_the_backend_dies_are_sent_again(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    calls = [{"id": f"slow{i}", "server": "demo", "tool": "sleep", "arguments": {"seconds": 2}} for i in range(2)]
    calls.append({"id": "crash", "server": "demo", "tool": "crash", "arguments": {"once": str(tmp_path / "crashed")}})
    document = await run_batch(client, calls, max_concurrency=3)
    items = by_id(document)
    assert document["ok"] is True
    assert items["crash"]["attempts"] == 2 and items["crash"]["content"][0]["text"] == "still alive"
    for slow in ("slow0", "slow1"):  # cut off by the crash, then run in full on the next process
        assert items[slow]["attempts"] == 2 and items[slow]["content"][0]["text"] == "slept 2.0s"


async def test_garbage_lines_on_stdio_stdout_are_skipped(client: httpx.AsyncClient) -> None:
    # `noisy` printed a banner before its handshake; `garble` writes a line of text between two answers
    calls = [
        {"id": "before", "server": "noisy", "tool": "stats"},
        {"id": "garble", "server": "noisy", "tool": "garble"},
        {"id": "after", "server": "noisy", "tool": "echo", "arguments": {"message": "still here"}},
        {"id": "later", "server": "noisy", "tool": "stats"},
    ]
    document = await run_batch(client, calls, mode="serial")
    items = by_id(document)
    assert document["ok"] is True
    assert [items[i]["attempts"] for i in ("before", "garble", "after", "later")] == [1, 1, 1, 1]
    assert items["garble"]["content"][0]["text"] == "garbled"
    assert items["after"]["content"][0]["text"] == "still here"
    assert items["before"]["structured_content"]["pid"] == items["later"]["structured_content"]["pid"]  # same session


async def test_bytes_on_stdio_stdout_that_are_not_utf8_cost_only_their_own_line(client: httpx.AsyncClient) -> None:
    # The stdio transport reads lines as bytes: an undecodable line is one parse error the session skips, and the
    # answer on the next line still arrives, on the same session.
    calls = [
        {"id": "before", "server": "quick", "tool": "stats"},
        {"id": "garble", "server": "quick", "tool": "garble", "arguments": {"binary": True}},
        {"id": "after", "server": "quick", "tool": "stats"},
    ]
    document = await run_batch(client, calls, mode="serial")
    items = by_id(document)
    assert [items[key]["status"] for key in ("before", "garble", "after")] == ["ok", "ok", "ok"]
    assert items["garble"]["content"][0]["text"] == "garbled" and items["garble"]["attempts"] == 1
    assert items["before"]["structured_content"]["pid"] == items["after"]["structured_content"]["pid"]


async def test_a_timeout_is_not_retried(client: httpx.AsyncClient, fresh_backend: HttpBackendProcess) -> None:
    calls = [{"id": "slow", "server": "slow", "tool": "stamp", "arguments": {"seconds": 3}}]
    document = await run_batch(client, calls)
    item = by_id(document)["slow"]
    assert item["status"] == "timeout" and item["attempts"] == 1
    assert item["error"] == {
        "code": "timeout",
        "message": "'slow' did not answer 'stamp' within 1s",
        "type": "timeout",
        "details": {"timeout_seconds": 1},
    }
    assert len((await call_backend(fresh_backend.url, "stats"))["arrivals"]) == 1  # the backend saw it once


async def test_a_tool_error_is_not_retried(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [{"id": "fail", "server": "demo", "tool": "fail"}])
    item = by_id(document)["fail"]
    assert item["status"] == "error" and item["attempts"] == 1 and item["error"]["code"] == "tool_error"
