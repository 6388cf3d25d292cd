"""A truncated item keeps as much of itself as its share of the budget holds, and the rest is read from its cursor:
on the item route, or as a call's own `cursor` (the next page, without calling the backend). Cursors that do not
verify or do not match end the item `invalid_cursor`. Through the real API, worker and backend."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.contract.budget import size
from mcp_batch.keys import Keys
from tests.support import run_batch

pytestmark = pytest.mark.timeout(90)

MB = 1_000_000
BIG = {"server": "demo_http", "tool": "big", "arguments": {"size": MB}}


def text_of(item: dict[str, Any]) -> str:
    return "".join(block["text"] for block in item.get("content") or [] if block["type"] == "text")


async def big_item(client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    document = await run_batch(client, [{"id": "big", **BIG}], response_max_bytes=300_000)
    return document["id"], document["results"][0]


async def test_a_1_mb_item_fills_its_share_and_the_rest_is_read_from_its_cursor(client: httpx.AsyncClient) -> None:
    batch_id, item = await big_item(client)
    assert item["status"] == "ok" and item["truncated"] is True
    kept = text_of(item)
    assert kept == "x" * len(kept) and len(kept) > 299_000  # the budget filled, not a note
    assert size(item) <= 300_000 - 2
    assert item["truncated_bytes"] > 700_000 and item["next_cursor"]
    pages, cursor = [kept], item["next_cursor"]
    while cursor:
        response = await client.get(f"/v1/batches/{batch_id}/items/big", params={"cursor": cursor})
        assert response.status_code == 200, response.text
        page = response.json()
        assert size(page) <= 300_000
        pages.append(text_of(page))
        cursor = page.get("next_cursor")
    assert "".join(pages) == "x" * MB


async def test_a_call_with_a_cursor_gets_the_next_page_without_calling_the_backend(client: httpx.AsyncClient) -> None:
    _, item = await big_item(client)
    document = await run_batch(client, [{"id": "more", **BIG, "cursor": item["next_cursor"]}])
    more = document["results"][0]
    assert more["status"] == "ok" and more["attempts"] == 0 and more.get("elapsed_seconds") is None
    assert len(text_of(more)) > 250_000 and more["next_cursor"] != item["next_cursor"]
    rest = await run_batch(client, [{"id": "rest", **BIG, "cursor": more["next_cursor"]}])
    assert rest["results"][0]["status"] == "ok" and text_of(rest["results"][0]).startswith("x")


async def test_a_cursor_that_does_not_verify_or_match_ends_the_item_invalid_cursor(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    batch_id, item = await big_item(client)
    cursor = item["next_cursor"]
    altered = cursor[:-4] + ("AAAA" if not cursor.endswith("AAAA") else "BBBB")
    other_args = {**BIG, "arguments": {"size": MB - 1}}
    calls = [
        {"id": "altered", **BIG, "cursor": altered},
        {"id": "other", **other_args, "cursor": cursor},
        {"id": "nonsense", **BIG, "cursor": "nonsense"},
    ]
    document = await run_batch(client, calls)
    reasons = {r["id"]: (r["status"], r["error"]["code"], r["error"]["message"]) for r in document["results"]}
    assert reasons["altered"][:2] == ("invalid_cursor", "invalid_cursor") and "signature" in reasons["altered"][2]
    assert "another server, tool or arguments" in reasons["other"][2]
    assert "malformed" in reasons["nonsense"][2]
    assert cursor not in str(document) and altered not in str(document)
    assert document["counts"]["failed"] == 3

    response = await client.get(f"/v1/batches/{batch_id}/items/big", params={"cursor": altered})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert altered not in response.text
    dry = await client.post("/v1/batches:validate", json={"calls": [{**BIG, "cursor": altered}]})
    assert dry.json()["results"][0]["status"] == "invalid_cursor" and dry.json()["valid"] is False

    await redis.delete(*Keys().batch_keys(batch_id))  # the batch it came from is gone: its cursors with it
    gone = await run_batch(client, [{"id": "gone", **BIG, "cursor": cursor}])
    assert "no longer exists" in gone["results"][0]["error"]["message"]
