"""The full batch contract through the real API and worker: bounds, schema, the read-only gate, references,
byte budgets, items, JSON Lines results and the dry run."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from tests.support import by_id, run_batch

pytestmark = pytest.mark.timeout(90)
SECRET = "hunter2-secret-value"


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["strict"] = {**servers["demo"], "deny_tools": ["stats"], "read_only_tools": ["write"]}
    return servers


def call(tool: str, server: str = "demo", **arguments: Any) -> dict[str, Any]:
    return {"server": server, "tool": tool, "arguments": arguments}


async def test_ids_are_unique_ignoring_case_and_carry_no_dots(client: httpx.AsyncClient) -> None:
    calls = [{"id": "Cur", **call("echo")}, {"id": "cur", **call("echo")}, {"id": "a.b", **call("echo")}]
    response = await client.post("/v1/batches", json={"calls": calls})
    assert response.status_code == 422
    assert [d["loc"] for d in response.json()["detail"]] == [["body", "calls", 1, "id"], ["body", "calls", 2, "id"]]


async def test_calls_over_a_bound_are_invalid_and_never_dispatched(client: httpx.AsyncClient) -> None:
    deep: Any = SECRET
    for _ in range(9):
        deep = [deep]
    document = await run_batch(
        client,
        [
            {"id": "deep", **call("echo", data=deep)},
            {"id": "name", **call("t" * 201)},
            {"id": "fine", **call("echo", message="ok")},
        ],
    )
    items = by_id(document)
    big = await client.post(
        "/v1/batches", json={"calls": [call("echo", message="ok"), call("echo", message=SECRET * 2000)]}
    )
    assert big.status_code == 422 and big.json()["detail"][0]["loc"] == ["body", "calls", 1, "arguments"]
    assert "20000" in big.json()["detail"][0]["msg"] and SECRET not in big.text
    assert items["deep"]["status"] == "invalid_call" and "levels deep" in items["deep"]["error"]["message"]
    assert items["name"]["status"] == "invalid_call" and "tool name" in items["name"]["error"]["message"]
    assert items["fine"]["status"] == "ok"
    assert all("attempts" not in items[i] for i in ("deep", "name"))  # never sent
    assert SECRET not in json.dumps(document)


async def test_arguments_are_checked_against_the_tool_schema(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [call("echo", message={"k": SECRET}), call("write")], read_only=False)
    typed, missing = document["results"]
    assert typed["status"] == "invalid_call" and typed["error"]["details"]["param"] == "message"
    assert typed["error"]["message"] == "argument 'message' must be of type string"
    assert missing["status"] == "invalid_call" and missing["error"]["details"]["param"] == "key"
    assert SECRET not in json.dumps(document)


async def test_a_batch_is_read_only_by_default(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [call("write", key="k"), call("echo")])
    write, echo = document["results"]
    assert write["status"] == "blocked" and write["error"]["code"] == "not_read_only"
    assert echo["status"] == "ok"
    allowed = await run_batch(client, [call("write", key="k")], read_only=False)
    assert allowed["results"][0]["status"] == "ok" and allowed["read_only"] is False


async def test_the_servers_file_overrides_annotations(client: httpx.AsyncClient) -> None:
    document = await run_batch(
        client, [call("write", "strict", key="k"), call("stats", "strict"), call("call_tools_batch", "strict")]
    )
    listed, denied, nested = document["results"]
    assert listed["status"] == "ok"  # read_only_tools makes the write usable in a read-only batch
    assert denied["status"] == "blocked" and denied["error"]["code"] == "denied"
    assert nested["status"] == "blocked" and nested["error"]["code"] == "nested_batch"
    still_denied = await run_batch(client, [call("stats", "strict")], read_only=False)
    assert still_denied["results"][0]["status"] == "blocked"


async def test_references_carry_values_of_earlier_results_keeping_their_type(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "m", **call("measure", name="depth", value=7.5)},
        {"id": "r", **call("reflect", data={"items": [{"id": 41}, {"id": 42}]})},
        {"id": "use", **call("reflect", data={"v": "@m.value", "tags": ["@m.tags.1"], "second": "@r.data.items.1.id"})},
        {"id": "plain", **call("reflect", data="@nobody.value")},
    ]
    items = by_id(await run_batch(client, calls, max_concurrency=8))
    assert items["use"]["structured_content"]["data"] == {"v": 7.5, "tags": ["depth"], "second": 42}
    assert items["plain"]["structured_content"]["data"] == "@nobody.value"


async def test_a_bad_reference_or_a_failed_dependency_stops_only_its_dependents(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "m", **call("measure")},
        {"id": "bad", **call("fail")},
        {"id": "missing", **call("reflect", data="@m.nope.deeper")},
        {"id": "after_bad", **call("reflect", data="@bad.x")},
        {"id": "chained", **call("reflect", data="@after_bad.data")},
        {"id": "fine", **call("reflect", data="@m.name")},
    ]
    items = by_id(await run_batch(client, calls))
    assert items["missing"]["status"] == "invalid_reference"
    assert items["missing"]["error"]["details"] == {"path": "m.nope"}
    assert items["after_bad"]["status"] == "skipped" and items["after_bad"]["error"]["code"] == "dependency_failed"
    assert items["chained"]["status"] == "skipped"
    assert items["fine"]["status"] == "ok"


async def test_references_wait_only_for_what_they_need(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "slow", **call("sleep", seconds=1.0, tag="slow")},
        {"id": "needs_slow", **call("reflect", data="@slow.result")},
        {"id": "free", **call("sleep", seconds=0.01)},
    ]
    items = by_id(await run_batch(client, calls, max_concurrency=3))
    assert items["needs_slow"]["structured_content"]["data"] == "slept 1.0s slow"
    assert datetime.fromisoformat(items["needs_slow"]["started_at"]) >= datetime.fromisoformat(
        items["slow"]["finished_at"]
    )
    assert items["free"]["finished_at"] < items["slow"]["finished_at"]
    assert all(item["queued_seconds"] >= 0 for item in items.values())


async def test_a_document_over_its_budget_is_shrunk_and_nothing_is_lost(client: httpx.AsyncClient) -> None:
    calls = [{"id": f"b{i}", **call("big", size=20_000)} for i in range(3)] + [{"id": "small", **call("echo")}]
    document = await run_batch(client, calls, response_max_bytes=30_000)
    assert len(json.dumps(document["results"], separators=(",", ":"))) <= 30_000
    assert document["truncated"] is True and document["truncated_bytes"] > 3 * 10_000
    big = by_id(document)["b0"]
    assert big["truncated"] is True and big["truncated_bytes"] > 10_000
    assert by_id(document)["small"]["truncated"] is False
    whole = (await client.get(f"/v1/batches/{document['id']}/items/b0")).json()
    assert whole["content"][0]["text"] == "x" * 20_000 and whole.get("next_cursor") is None


async def test_an_item_larger_than_a_response_is_paged(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [{"id": "huge", **call("big", size=700_000)}])
    text, cursor, pages = "", None, 0
    while True:
        params = {"cursor": cursor} if cursor else {}
        page = (await client.get(f"/v1/batches/{document['id']}/items/huge", params=params)).json()
        text += "".join(block["text"] for block in page["content"])
        pages += 1
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert text == "x" * 700_000 and pages >= 3
    assert (await client.get(f"/v1/batches/{document['id']}/items/nope")).status_code == 404


async def test_results_stream_as_json_lines_with_a_cursor_and_a_filter(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [call("echo"), call("fail"), call("echo")], mode="serial")
    url = f"/v1/batches/{document['id']}/results"
    response = await client.get(url)
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [(item["seq"], item["index"]) for item in lines] == [(1, 0), (2, 1), (3, 2)]
    assert response.headers["x-next-after"] == "3"
    failed = (await client.get(url, params={"status": "error"})).text.splitlines()
    assert [json.loads(line)["index"] for line in failed] == [1]
    later = await client.get(url, params={"after": 2})
    assert [json.loads(line)["seq"] for line in later.text.splitlines()] == [3]
    nothing = await client.get(url, params={"after": 3})
    assert nothing.text == "" and nothing.headers["x-next-after"] == "3"
    bad = await client.get(url, params={"status": "finished-ish"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "status"]
    assert (await client.get("/v1/batches/nope/results")).status_code == 404


async def test_a_big_document_pages_its_results(client: httpx.AsyncClient) -> None:
    calls = [call("echo", message=str(i)) for i in range(400)]
    document = await run_batch(client, calls, max_concurrency=32)
    assert len(document["results"]) == 292 and document["next_offset"] == 292  # 299,998 // 1,025 items a page
    rest = (await client.get(f"/v1/batches/{document['id']}", params={"offset": 292})).json()
    assert [i["index"] for i in rest["results"]][:2] == [292, 293] and rest["next_offset"] is None


async def test_the_dry_run_reports_would_be_statuses_and_queues_nothing(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    calls = [
        call("echo"),
        call("write", key="k"),
        call("echo", message=5),
        call("nothing_here"),
        call("echo", "nowhere"),
    ]
    response = await client.post("/v1/batches:validate", json={"calls": calls})
    assert response.status_code == 200
    report = response.json()
    statuses = ["pending", "blocked", "invalid_call", "unknown_tool", "unknown_server"]
    assert report["valid"] is False and [r["status"] for r in report["results"]] == statuses
    assert await redis.keys("mcpb:batch:*") == [] and await redis.zcard("mcpb:queue") == 0
    invalid = await client.post("/v1/batches:validate", json={"calls": []})
    assert invalid.status_code == 422
