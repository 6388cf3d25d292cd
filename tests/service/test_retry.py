"""POST /v1/batches/{id}/retry: a new batch of only the items that did not succeed, linked by `retry_of`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from service.application.retry import retry_request
from tests.mcp_batch.store.stored import advance
from tests.support import by_id, finished, run_batch, submit

pytestmark = pytest.mark.timeout(90)


def call(id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"id": id, "server": "demo", "tool": tool, "arguments": arguments}


async def retry(client: httpx.AsyncClient, batch_id: str, key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return await client.post(f"/v1/batches/{batch_id}/retry", headers=headers)


async def submitted(client: httpx.AsyncClient, answer: httpx.Response) -> dict[str, Any]:
    """The document of the batch a 202 answer names (the answer itself carries no page of results)."""
    assert answer.status_code == 202, answer.text
    document: dict[str, Any] = (await client.get(answer.headers["location"])).json()
    return document


async def stored_calls(redis: aioredis.Redis, batch_id: str) -> list[dict[str, Any]]:
    return [json.loads(spec) for spec in await redis.lrange(Keys().calls(batch_id), 0, -1)]


async def test_retry_reruns_only_the_failed_items_with_their_ids_and_settings(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    calls = [
        call("a", "echo", message="one"),
        call("b", "fail", reason="first"),
        call("c", "echo", message="two"),
        call("d", "fail", reason="second"),
    ]
    options = {"mode": "serial", "max_concurrency": 3, "response_max_bytes": 50_000}
    original = await run_batch(client, calls, **options)
    assert original["failed_ids"] == ["b", "d"]
    answer = await retry(client, original["id"])
    assert answer.status_code == 202
    assert answer.json()["results"] == [] and answer.json()["counts"]["total"] == 2  # the summary: read Location
    document = await submitted(client, answer)
    assert answer.headers["location"] == f"/v1/batches/{document['id']}" and document["id"] != original["id"]
    assert document["retry_of"] == original["id"] and original["retry_of"] is None
    assert [item["id"] for item in document["results"]] == ["b", "d"]
    assert (document["mode"], document["max_concurrency"], document["response_max_bytes"]) == ("serial", 3, 50_000)
    assert (document["on_error"], document["read_only"]) == ("continue", True)
    assert await stored_calls(redis, document["id"]) == [calls[1], calls[3]]
    rerun = await finished(client, document["id"])
    assert rerun["failed_ids"] == ["b", "d"] and rerun["retry_of"] == original["id"]


async def test_retry_includes_skipped_and_never_started_items(client: httpx.AsyncClient) -> None:
    calls = [call("a", "echo"), call("b", "fail"), call("c", "echo"), call("d", "echo")]
    original = await run_batch(client, calls, mode="serial", on_error="stop")
    assert original["stopped_at"] == 1 and original["counts"]["skipped"] == 2
    document = await submitted(client, await retry(client, original["id"]))
    assert [item["id"] for item in document["results"]] == ["b", "c", "d"]
    assert document["on_error"] == "stop"


async def test_retry_keeps_references_between_retried_items(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    calls = [call("x", "fail"), call("ok", "echo"), call("y", "reflect", data="@x.value")]
    original = await run_batch(client, calls)
    assert by_id(original)["y"]["error"]["code"] == "dependency_failed"  # skipped, with a record
    document = await submitted(client, await retry(client, original["id"]))
    assert [item["id"] for item in document["results"]] == ["x", "y"]
    assert (await stored_calls(redis, document["id"]))[1]["arguments"] == {"data": "@x.value"}


async def test_retry_fills_in_values_referenced_from_items_that_succeeded(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    calls = [call("m", "measure", name="depth", value=7.5), call("f", "fail", reason="@m.name")]
    original = await run_batch(client, calls)
    assert original["failed_ids"] == ["f"]
    document = await submitted(client, await retry(client, original["id"]))
    assert [item["id"] for item in document["results"]] == ["f"]
    assert (await stored_calls(redis, document["id"]))[0]["arguments"] == {"reason": "depth"}
    rerun = await finished(client, document["id"])
    assert "depth" in json.dumps(rerun["results"][0]["content"])


async def test_retry_refuses_a_reference_no_retry_can_fix(client: httpx.AsyncClient) -> None:
    calls = [call("m", "measure"), call("use", "reflect", data="@m.no_such_field")]
    original = await run_batch(client, calls)
    assert by_id(original)["use"]["status"] == "invalid_reference"
    answer = await retry(client, original["id"])
    assert answer.status_code == 409 and "m.no_such_field" in answer.json()["detail"]


async def test_retry_of_a_batch_where_everything_succeeded_is_409(client: httpx.AsyncClient) -> None:
    original = await run_batch(client, [call("a", "echo")])
    answer = await retry(client, original["id"])
    assert answer.status_code == 409 and "nothing to retry" in answer.json()["detail"]


async def test_retry_of_an_unfinished_batch_is_409_naming_its_status(client: httpx.AsyncClient) -> None:
    original = await submit(client, [call("slow", "sleep", seconds=1.5)])
    answer = await retry(client, original["id"])
    assert answer.status_code == 409
    assert any(status in answer.json()["detail"] for status in ("queued", "running"))
    await finished(client, original["id"])


async def test_retry_of_an_unknown_batch_is_404(client: httpx.AsyncClient) -> None:
    assert (await retry(client, "no-such-batch")).status_code == 404


async def test_retry_with_an_idempotency_key_makes_one_retry(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    original = await run_batch(client, [call("a", "fail")])
    first, again = await retry(client, original["id"], "retry-1"), await retry(client, original["id"], "retry-1")
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again.json()["retry_of"] == original["id"]
    body, headers = {"calls": [call("a", "fail")]}, {"Idempotency-Key": "retry-1"}
    other = await client.post("/v1/batches", json=body, headers=headers)
    assert other.status_code == 409  # the key belongs to the retry


def many(n: int) -> BatchRequest:
    calls = [{"id": f"c{i}", "server": "s", "tool": "t", "arguments": {"i": i}} for i in range(n)]
    return BatchRequest.model_validate({"calls": calls})


async def test_retry_of_ten_thousand_items_picks_the_ones_that_did_not_succeed(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = new_batch_id()
    job = shards.job_id(batch_id, 0)
    await store.submits.create(many(10_000), 16, batch_id=batch_id, jobs=[job])
    statuses = {3: "error", 5: "skipped", 7: "timeout"}  # by index % 10; the rest ok
    for _ in range(10):
        claims = await asyncio.gather(*(advance(store, batch_id, job, None, want_next=True) for _ in range(1_000)))
        await asyncio.gather(
            *(
                advance(store, batch_id, job, (c, {"status": statuses.get(c.index % 10, "ok")}), want_next=False)
                for c in claims
                if c is not None
            )
        )
    assert (await store.reads.status(batch_id)) == "completed"
    request = (await retry_request(store, batch_id)).request
    assert [c.id for c in request.calls] == [f"c{i}" for i in range(10_000) if i % 10 in statuses]
    assert request.calls[0].arguments == {"i": 3} and request.max_concurrency == 16
