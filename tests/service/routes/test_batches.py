"""The batch routes end to end: real API, real worker, real Redis, real backends over stdio and HTTP."""

from __future__ import annotations

import asyncio
from datetime import datetime
from itertools import pairwise
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import by_id, eventually, finished, run_batch, running_api, submit

pytestmark = pytest.mark.timeout(90)


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


async def test_submit_answers_202_with_location_the_summary_and_counts(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}] * 3})
    assert response.status_code == 202
    document = response.json()
    assert response.headers["location"] == f"/v1/batches/{document['id']}"
    assert document["status"] in {"queued", "running", "completed"}
    assert document["mode"] == "concurrent" and document["on_error"] == "continue"
    assert document["counts"]["total"] == 3
    assert document["results"] == [] and document["next_offset"] == 0  # no page of pending items: read Location
    assert (await client.get(response.headers["location"])).json()["results"][0]["id"] == "0"


async def test_a_batch_runs_on_both_transports_and_aggregates_results(client: httpx.AsyncClient) -> None:
    document = await run_batch(
        client,
        [
            {"id": "stdio", "server": "demo", "tool": "echo", "arguments": {"message": "hi"}},
            {"id": "http", "server": "demo_http", "tool": "echo", "arguments": {"message": "there"}},
            {"id": "structured", "server": "demo_http", "tool": "measure", "arguments": {"value": 3}},
        ],
    )
    assert document["ok"] is True
    assert document["counts"] == {
        "total": 3,
        "succeeded": 3,
        "failed": 0,
        "pending": 0,
        "running": 0,
        "skipped": 0,
        "input_required": 0,
        "cancelled": 0,
        "expired": 0,
        "unauthenticated": 0,
    }
    items = by_id(document)
    assert items["stdio"]["content"] == [{"type": "text", "text": "hi"}]
    assert items["http"]["content"] == [{"type": "text", "text": "there"}]
    assert items["structured"]["structured_content"]["value"] == 3
    for item in document["results"]:
        assert item["status"] == "ok" and item["is_error"] is False and "error" not in item
        assert item["elapsed_seconds"] >= 0 and item["worker"]
        assert ts(item["started_at"]) <= ts(item["finished_at"])
    assert document["finished_at"] and document["elapsed_seconds"] > 0


async def test_concurrent_mode_overlaps_calls(client: httpx.AsyncClient) -> None:
    calls = [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 0.5}} for _ in range(4)]
    document = await run_batch(client, calls, max_concurrency=4)
    items = document["results"]
    # every call started before any call finished: they ran at the same time
    assert max(ts(i["started_at"]) for i in items) < min(ts(i["finished_at"]) for i in items)


async def test_serial_mode_runs_calls_one_after_another_in_order(client: httpx.AsyncClient) -> None:
    calls = [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 0.05}} for _ in range(4)]
    document = await run_batch(client, calls, mode="serial")
    items = document["results"]
    assert document["ok"] is True
    for before, after in pairwise(items):
        assert ts(before["finished_at"]) <= ts(after["started_at"])


async def test_on_error_continue_runs_everything_and_lists_failures(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "a", "server": "demo", "tool": "echo"},
        {"id": "b", "server": "demo", "tool": "fail"},
        {"id": "c", "server": "demo", "tool": "echo"},
    ]
    document = await run_batch(client, calls, mode="serial")
    assert document["ok"] is False and document["stopped_at"] is None
    assert document["failed_ids"] == ["b"] and document["failed_indexes"] == [1]
    failed = by_id(document)["b"]
    assert failed["status"] == "error" and failed["is_error"] is True
    assert failed["error"]["code"] == "tool_error" and failed["content"]
    assert by_id(document)["c"]["status"] == "ok"


async def test_on_error_stop_skips_the_rest(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "a", "server": "demo", "tool": "echo"},
        {"id": "b", "server": "demo", "tool": "fail"},
        {"id": "c", "server": "demo", "tool": "echo"},
        {"id": "d", "server": "demo", "tool": "echo"},
    ]
    document = await run_batch(client, calls, mode="serial", on_error="stop")
    assert document["stopped_at"] == 1
    assert [i["status"] for i in document["results"]] == ["ok", "error", "skipped", "skipped"]
    assert document["counts"]["skipped"] == 2 and document["counts"]["failed"] == 1
    assert document["counts"]["pending"] == 0 and document["status"] == "completed"


async def test_on_error_stop_in_concurrent_mode_starts_nothing_after_the_failure(client: httpx.AsyncClient) -> None:
    calls = [{"id": "bad", "server": "demo", "tool": "fail"}]
    calls += [{"id": f"s{i}", "server": "demo", "tool": "sleep", "arguments": {"seconds": 0.2}} for i in range(20)]
    document = await run_batch(client, calls, on_error="stop", max_concurrency=2)
    assert document["stopped_at"] == 0
    failure_end = ts(by_id(document)["bad"]["finished_at"])
    ran = [i for i in document["results"][1:] if i["status"] != "skipped"]
    assert all(ts(i["started_at"]) <= failure_end for i in ran)
    assert document["counts"]["skipped"] == 20 - len(ran) >= 17


async def test_unknown_server_and_unknown_tool_are_item_statuses(client: httpx.AsyncClient) -> None:
    document = await run_batch(
        client,
        [
            {"id": "s", "server": "nowhere", "tool": "echo"},
            {"id": "t", "server": "demo", "tool": "no_such_tool"},
            {"id": "ok", "server": "demo", "tool": "echo"},
        ],
    )
    items = by_id(document)
    assert items["s"]["status"] == "unknown_server" and items["s"]["error"]["code"] == "unknown_server"
    assert items["t"]["status"] == "unknown_tool" and items["t"]["error"]["code"] == "unknown_tool"
    assert items["ok"]["status"] == "ok"
    assert document["failed_ids"] == ["s", "t"]


async def test_results_appear_while_the_batch_runs(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "quick", "server": "demo", "tool": "echo"},
        {"id": "slow", "server": "demo", "tool": "sleep", "arguments": {"seconds": 3}},
    ]
    batch_id = (await submit(client, calls))["id"]

    async def quick_done() -> dict[str, Any] | None:  # a client polling, as the feature is for
        document: dict[str, Any] = (await client.get(f"/v1/batches/{batch_id}")).json()
        return document if by_id(document)["quick"]["status"] == "ok" else None

    document = await eventually(quick_done, what="the quick item ok")
    assert document["status"] == "running"
    assert document["counts"]["succeeded"] == 1 and document["counts"]["running"] == 1
    assert by_id(document)["slow"]["status"] == "running"
    assert (await finished(client, batch_id))["ok"] is True


async def test_wait_returns_as_soon_as_the_batch_completes(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 0.3}}]))["id"]
    loop = asyncio.get_running_loop()
    start = loop.time()
    document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 50})).json()
    assert document["status"] == "completed"
    assert loop.time() - start < 25  # far below the 50 s asked for: woken by completion


async def test_wait_returns_the_running_document_when_time_runs_out(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 30}}]))["id"]
    document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 0.5})).json()
    assert document["status"] in {"queued", "running"}


async def test_wait_outside_its_bounds_is_rejected(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, [{"server": "demo", "tool": "echo"}]))["id"]
    response = await client.get(f"/v1/batches/{batch_id}", params={"wait": 61})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "wait"]


async def test_a_submit_that_waits_answers_with_the_ended_batch_and_its_results(client: httpx.AsyncClient) -> None:
    calls = [{"id": f"e{i}", "server": "demo", "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(3)]
    response = await client.post("/v1/batches", json={"calls": calls}, params={"wait": 30, "limit": 2})
    assert response.status_code == 202
    document = response.json()
    assert response.headers["location"] == f"/v1/batches/{document['id']}"
    assert document["status"] == "completed" and document["counts"]["succeeded"] == 3
    assert [item["content"] for item in document["results"]] == [
        [{"type": "text", "text": "m0"}],
        [{"type": "text", "text": "m1"}],
    ]
    assert document["next_offset"] == 2  # `limit` pages the results, as a read's does
    assert (await client.get(response.headers["location"])).json()["results"][2]["id"] == "e2"


async def test_a_submit_that_waits_answers_with_the_running_batch_when_the_wait_runs_out(
    client: httpx.AsyncClient,
) -> None:
    calls = [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 30}}]
    response = await client.post("/v1/batches", json={"calls": calls}, params={"wait": 0.5})
    assert response.status_code == 202
    assert response.json()["status"] in {"queued", "running"}
    await client.post(f"{response.headers['location']}/cancel")


async def test_a_submits_wait_outside_its_bounds_is_rejected_and_nothing_is_stored(client: httpx.AsyncClient) -> None:
    calls = [{"server": "demo", "tool": "echo"}]
    response = await client.post("/v1/batches", json={"calls": calls}, params={"wait": 61})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "wait"]
    assert (await client.get("/v1/batches")).json()["batches"] == []


async def test_unknown_batch_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/batches/doesnotexist", params={"wait": 1})
    assert response.status_code == 404
    assert "not found" in response.json()["detail"]


async def test_paging_returns_only_the_requested_slice(client: httpx.AsyncClient) -> None:
    calls = [{"server": "demo", "tool": "echo", "arguments": {"message": str(i)}} for i in range(10)]
    batch_id = (await run_batch(client, calls))["id"]
    document = (await client.get(f"/v1/batches/{batch_id}", params={"offset": 7, "limit": 5})).json()
    assert document["results_offset"] == 7
    assert [i["index"] for i in document["results"]] == [7, 8, 9]
    assert document["counts"]["total"] == 10


async def test_results_expire_after_the_retention(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    batch_id = (await run_batch(client, [{"server": "demo", "tool": "fail"}]))["id"]
    keys = await redis.keys(f"mcpb:batch:{{{batch_id}}}*")
    assert len(keys) == 6
    for key in keys:
        assert 0 < await redis.ttl(key) <= 86_400


async def test_the_202_is_the_document_a_read_right_after_answers(settings: Settings) -> None:
    calls = [{"id": f"c{n}", "server": "demo", "tool": "echo"} for n in range(3)]
    body = {"calls": calls, "deadline_seconds": 600, "metadata": {"team": "a"}, "retention_seconds": 600}
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url) as http:  # no worker
        response = await http.post("/v1/batches", json=body)
        assert response.status_code == 202
        read = await http.get(response.headers["location"], params={"limit": 0})
    answered, stored = response.json(), read.json()
    assert answered.pop("elapsed_seconds") <= stored.pop("elapsed_seconds")  # time since created_at, read later
    assert answered == stored
