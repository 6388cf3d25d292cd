"""Backend sessions under failure: a crashing stdio backend, an HTTP backend that goes away, a hanging backend.

Every item the broken session carried gets a terminal error status; none hangs; the next call reopens."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.support import HttpBackendProcess, by_id, finished, run_batch, running_service, submit

pytestmark = pytest.mark.timeout(90)


async def test_a_stdio_backend_that_crashes_fails_its_items_and_is_reopened(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "before", "server": "demo", "tool": "echo"},
        {"id": "crash", "server": "demo", "tool": "crash"},
        {"id": "after", "server": "demo", "tool": "echo", "arguments": {"message": "back"}},
    ]
    document = await run_batch(client, calls, mode="serial")
    items = by_id(document)
    assert items["before"]["status"] == "ok"
    assert items["crash"]["status"] == "error" and items["crash"]["error"]["code"] == "backend_error"
    # `crash` is read-only, so it was sent again, to a fresh process each time, until max_attempts
    assert items["crash"]["attempts"] == 3 and items["crash"]["error"]["details"] == {"attempts": 3}
    assert items["after"]["status"] == "ok" and items["after"]["content"][0]["text"] == "back"


async def test_items_in_flight_when_the_backend_dies_get_an_error(settings: Settings) -> None:
    calls = [{"id": f"slow{i}", "server": "demo", "tool": "sleep", "arguments": {"seconds": 20}} for i in range(3)]
    calls.append({"id": "crash", "server": "demo", "tool": "crash"})
    no_retries = settings.model_copy(update={"max_attempts": 1})  # retried calls: tests/worker/test_retries.py
    async with running_service(no_retries) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        document = await run_batch(client, calls, max_concurrency=4)
    assert {i["status"] for i in document["results"]} == {"error"}
    assert {i["attempts"] for i in document["results"]} == {1}
    assert all(i["elapsed_seconds"] < 15 for i in document["results"])  # failed at the crash, not at the end


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["doomed"] = {"url": fresh_backend.url, "timeout_seconds": 10}
    servers["broken"] = {"command": "/nonexistent/mcp-server", "args": []}
    return servers


async def test_an_http_backend_that_goes_away_fails_its_items(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    first = await run_batch(client, [{"server": "doomed", "tool": "echo"}])
    assert first["ok"] is True  # the session is open and working
    calls = [{"id": f"slow{i}", "server": "doomed", "tool": "sleep", "arguments": {"seconds": 20}} for i in range(2)]
    batch_id = (await submit(client, calls))["id"]
    document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 1})).json()
    assert document["status"] == "running"
    fresh_backend.stop()
    document = await finished(client, batch_id)
    assert [i["status"] for i in document["results"]] == ["error", "error"]
    later = await run_batch(client, [{"server": "doomed", "tool": "echo"}])
    assert later["results"][0]["status"] == "error"
    assert later["results"][0]["error"]["code"] in {"backend_unavailable", "backend_error"}


async def test_a_call_that_hangs_past_its_timeout_is_a_timeout(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "hang", "server": "quick", "tool": "hang"},
        {"id": "after", "server": "quick", "tool": "echo", "arguments": {"message": "still here"}},
    ]
    document = await run_batch(client, calls, mode="serial")
    items = by_id(document)
    assert items["hang"]["status"] == "timeout"
    assert items["hang"]["error"] == {
        "code": "timeout",
        "message": "'quick' did not answer 'hang' within 1s",
        "type": "timeout",
        "details": {"timeout_seconds": 1},
    }
    assert items["after"]["status"] == "ok"


async def test_a_frozen_backend_is_replaced_after_a_timeout(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "freeze", "server": "quick", "tool": "hang", "arguments": {"block": True}},
        {"id": "after", "server": "quick", "tool": "echo", "arguments": {"message": "new process"}},
    ]
    document = await run_batch(client, calls, mode="serial")
    items = by_id(document)
    assert items["freeze"]["status"] == "timeout"
    assert items["after"]["status"] == "ok" and items["after"]["content"][0]["text"] == "new process"


async def test_a_backend_that_cannot_start_fails_its_items(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [{"server": "broken", "tool": "echo"}])
    item = document["results"][0]
    assert item["status"] == "error" and item["error"]["code"] == "backend_unavailable"
    assert item["elapsed_seconds"] < 10  # the failure is reported at once, not after the 20 s connect timeout


async def test_refreshing_the_tool_list_does_not_cut_calls_in_flight(settings: Settings) -> None:
    quick_refresh = settings.model_copy(update={"tools_refresh_seconds": 0.2})
    # a short call ends while two long ones are in flight, and its lane finds the tool list stale
    calls = [{"server": "demo", "tool": "sleep", "arguments": {"seconds": s}} for s in (0.3, 0.9, 0.9) * 3]
    async with running_service(quick_refresh) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        document = await run_batch(client, calls, max_concurrency=3)
    assert document["ok"] is True  # lanes met a stale list mid-batch; the others' calls went on
