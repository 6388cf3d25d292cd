"""Every item of an ended batch, whatever its status, appears exactly once in /results and the event stream, with
the same `seq` the document and the item route show: through the real API, worker and backend."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.service.routes.test_stream import items, stream
from tests.support import run_batch

pytestmark = pytest.mark.timeout(60)


def stop_after_a_failure() -> list[dict[str, Any]]:
    """Four serial calls, the second failing: with on_error=stop the last two never run."""
    echo = {"server": "demo", "tool": "echo", "arguments": {"message": "hi"}}
    return [
        {"id": "a", **echo},
        {"id": "b", "server": "demo", "tool": "fail"},
        {"id": "c", **echo},
        {"id": "d", **echo},
    ]


async def results(client: httpx.AsyncClient, batch_id: str, **params: Any) -> tuple[list[dict[str, Any]], str]:
    response = await client.get(f"/v1/batches/{batch_id}/results", params=params)
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()], response.headers["X-Next-After"]


async def test_skipped_items_appear_once_in_results_stream_and_document(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, stop_after_a_failure(), mode="serial", on_error="stop")
    assert document["counts"]["skipped"] == 2
    batch_id = document["id"]

    lines, next_after = await results(client, batch_id)
    assert [(line["seq"], line["id"], line["status"]) for line in lines] == [
        (1, "a", "ok"),
        (2, "b", "error"),
        (3, "c", "skipped"),
        (4, "d", "skipped"),
    ]
    assert next_after == "4"
    skipped, _ = await results(client, batch_id, status="skipped")
    assert [line["id"] for line in skipped] == ["c", "d"]
    resumed, _ = await results(client, batch_id, after=2)
    assert [line["id"] for line in resumed] == ["c", "d"]
    assert (await results(client, batch_id, after=4))[0] == []

    events = await stream(client, batch_id)
    assert [(item["seq"], item["id"], item["status"]) for item in items(events)] == [
        (line["seq"], line["id"], line["status"]) for line in lines
    ]
    assert [item["id"] for item in items(await stream(client, batch_id, after=3))] == ["d"]

    assert [(item["id"], item["seq"]) for item in document["results"]] == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]


async def test_seq_is_filled_in_the_document_and_the_item_route(client: httpx.AsyncClient) -> None:
    calls = [{"id": f"e{i}", "server": "demo_http", "tool": "echo", "arguments": {"message": str(i)}} for i in range(5)]
    document = await run_batch(client, calls, max_concurrency=5)
    lines, _ = await results(client, document["id"])
    order = {line["id"]: line["seq"] for line in lines}
    assert sorted(order.values()) == [1, 2, 3, 4, 5]
    assert {item["id"]: item["seq"] for item in document["results"]} == order
    for item_id, seq in order.items():
        item = (await client.get(f"/v1/batches/{document['id']}/items/{item_id}")).json()
        assert item["seq"] == seq


async def test_cancelled_items_that_never_ran_are_listed_once_the_batch_ends(client: httpx.AsyncClient) -> None:
    calls = [{"id": f"s{i}", "server": "demo_http", "tool": "sleep", "arguments": {"seconds": 0.05}} for i in range(30)]
    response = await client.post("/v1/batches", json={"calls": calls, "mode": "serial"})
    batch_id = response.json()["id"]
    await client.post(f"/v1/batches/{batch_id}/cancel")
    document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 30})).json()
    assert document["status"] == "cancelled"
    lines, next_after = await results(client, batch_id)
    assert sorted(line["id"] for line in lines) == sorted(call["id"] for call in calls)
    assert [line["seq"] for line in lines] == list(range(1, 31)) and next_after == "30"
    assert document["counts"]["cancelled"] == sum(line["status"] == "cancelled" for line in lines) > 0


async def test_each_line_of_results_is_the_documents_item_field_for_field(client: httpx.AsyncClient) -> None:
    calls = [
        {"id": "text", "server": "demo", "tool": "echo", "arguments": {"message": "é ✓"}},
        {"id": "structured", "server": "demo", "tool": "measure", "arguments": {"value": 1.5}},
        {"id": "reflected", "server": "demo", "tool": "reflect", "arguments": {"data": {"n": [1, None, "x"]}}},
        {"id": "failing", "server": "demo", "tool": "fail"},
        {"id": "nowhere", "server": "nowhere", "tool": "echo"},
        {"id": "never", "server": "demo", "tool": "echo"},
    ]
    document = await run_batch(client, calls, mode="serial", on_error="stop")
    statuses = [item["status"] for item in document["results"]]
    assert statuses == ["ok", "ok", "ok", "error", "skipped", "skipped"], statuses
    lines, _ = await results(client, document["id"])
    by_index = {item["index"]: item for item in document["results"]}
    assert sorted(line["index"] for line in lines) == sorted(by_index)
    for line in lines:
        assert line == by_index[line["index"]]
        assert list(line) == list(by_index[line["index"]])  # the fields in the same order too
    item = (await client.get(f"/v1/batches/{document['id']}/items/structured")).json()
    assert item == by_index[1] and item["structured_content"] is not None
