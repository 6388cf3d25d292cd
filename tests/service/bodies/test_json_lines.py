"""JSON Lines uploads of POST /v1/batches against the real API, worker, Redis and demo backends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.support import ServiceHandle, finished, running_api

pytestmark = pytest.mark.timeout(120)

NDJSON = {"content-type": "application/x-ndjson"}


def lines(*calls: Any) -> bytes:
    return b"".join(json.dumps(call).encode() + b"\n" for call in calls)


def problems(response: httpx.Response) -> list[tuple[list[Any], str]]:
    assert response.status_code == 422, response.text
    return [(p["loc"], p["msg"]) for p in response.json()["detail"]]


async def test_a_json_lines_body_is_a_batch_with_its_options_in_the_query(client: httpx.AsyncClient) -> None:
    body = lines(
        {"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": "one"}},
        {"id": "b", "server": "demo_http", "tool": "echo", "arguments": {"message": "two"}},
    )
    response = await client.post(
        "/v1/batches", content=body, headers=NDJSON, params={"mode": "serial", "on_error": "stop"}
    )
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/v1/batches/{response.json()['id']}"
    document = await finished(client, response.json()["id"])
    assert (document["mode"], document["on_error"], document["ok"]) == ("serial", "stop", True)
    assert [item["structured_content"] for item in document["results"]] == [{"result": "one"}, {"result": "two"}]


async def test_an_upload_may_wait_for_its_end_and_wait_is_not_taken_for_a_batch_option(
    client: httpx.AsyncClient,
) -> None:
    body = lines({"server": "demo", "tool": "echo", "arguments": {"message": "hi"}})
    response = await client.post("/v1/batches", content=body, headers=NDJSON, params={"mode": "serial", "wait": 30})
    assert response.status_code == 202, response.text
    document = response.json()
    assert document["status"] == "completed" and document["mode"] == "serial"
    assert document["results"][0]["content"] == [{"type": "text", "text": "hi"}]


async def test_application_jsonl_blank_lines_and_a_last_line_without_newline_are_taken(
    client: httpx.AsyncClient,
) -> None:
    body = b'{"server": "demo", "tool": "echo"}\r\n\n   \n{"server": "demo", "tool": "echo"}'
    response = await client.post("/v1/batches", content=body, headers={"content-type": "application/jsonl"})
    assert response.status_code == 202, response.text
    assert response.json()["counts"]["total"] == 2


async def test_every_bad_line_is_named_by_its_number_and_nothing_is_stored(
    service: ServiceHandle, client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    secret = "sk-live-do-not-echo"
    body = b"\n".join(
        [
            b'{"server": "demo", "tool": "echo"}',
            b'{"server": "demo", "tool": "echo", "arguments": {"token": "' + secret.encode() + b'"} oops',
            b'["not", "a", "call"]',
            b'{"tool": "echo", "arguments": "' + secret.encode() + b'"}',
            b'{"id": "x", "server": "demo", "tool": "echo"}',
        ]
    )
    response = await client.post("/v1/batches", content=body, headers=NDJSON, params={"mode": "sideways"})
    found = problems(response)
    assert (["query", "mode"], "Input should be 'concurrent' or 'serial'") in found
    assert found[1][0] == ["body", "line", 2] and found[1][1].startswith("not JSON: ")
    assert (["body", "line", 3], "expected a JSON object (one call)") in found
    assert (["body", "line", 4, "server"], "Field required") in found
    assert (["body", "line", 4, "arguments"], "Input should be a valid dictionary") in found
    assert not any(loc[:3] in (["body", "line", 1], ["body", "line", 5]) for loc, _ in found)
    assert secret not in response.text
    assert await redis.keys(f"{Keys(service.settings.key_prefix).prefix}:batch:*") == []


async def test_whole_batch_problems_name_the_line_too(client: httpx.AsyncClient) -> None:
    body = lines({"id": "a", "server": "demo", "tool": "echo"}, {}, {"id": "A", "server": "demo", "tool": "echo"})
    body = body.replace(b"{}\n", b"\n")  # a blank line 2: the duplicate is call 1, on line 3
    found = problems(await client.post("/v1/batches", content=body, headers=NDJSON))
    assert found == [(["body", "line", 3, "id"], "duplicate id: call 1 has the id of call 0")]
    found = problems(await client.post("/v1/batches", content=body[:5], headers=NDJSON, params={"bogus": "1"}))
    assert (["query", "bogus"], "not a batch option") in found


async def test_an_empty_upload_and_options_in_the_query_of_a_json_body_are_refused(client: httpx.AsyncClient) -> None:
    empty = problems(await client.post("/v1/batches", content=b"\n\n", headers=NDJSON))
    assert empty == [(["body"], "a batch needs at least one call: the body holds no line")]
    call = {"server": "demo", "tool": "echo"}
    misplaced = problems(await client.post("/v1/batches", json={"calls": [call]}, params={"mode": "serial"}))
    assert misplaced[0][0] == ["query", "mode"]


async def test_an_idempotency_key_makes_one_batch_of_two_uploads(client: httpx.AsyncClient) -> None:
    body = lines({"server": "demo", "tool": "echo"})
    headers = {**NDJSON, "Idempotency-Key": "upload-1"}
    first = await client.post("/v1/batches", content=body, headers=headers)
    again = await client.post("/v1/batches", content=body, headers=headers)
    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["id"] == again.json()["id"]


async def test_an_upload_over_the_body_limit_is_a_413_as_it_streams(settings: Settings) -> None:
    settings = settings.model_copy(update={"max_body_bytes": 2_000})
    body = lines(*({"server": "demo", "tool": "echo"} for _ in range(200)))
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        response = await client.post("/v1/batches", content=chunked(body, 500), headers=NDJSON)
    assert response.status_code == 413 and response.json() == {"detail": "request body over 2000 bytes"}


async def chunked(body: bytes, size: int = 50_000) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.serial  # its assertion is a duration
async def test_a_100000_line_upload_is_read_as_it_streams_without_holding_the_loop(settings: Settings) -> None:
    settings = settings.model_copy(update={"max_calls_per_batch": 100_000, "max_body_bytes": 64 * 1024 * 1024})
    body = lines(*({"server": "demo", "tool": "echo", "arguments": {"message": str(n)}} for n in range(100_000)))
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=120) as client:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        started = time.perf_counter()
        # chunked (no Content-Length), and refused only at the end for its query: every line is read and checked,
        # nothing stored (storing 100,000 items is another test's business)
        response = await client.post("/v1/batches", content=chunked(body), headers=NDJSON, params={"bogus": "1"})
        elapsed = time.perf_counter() - started
        stop.set()
        await tick
    assert problems(response) == [(["query", "bogus"], "not a batch option")]
    print(
        f"\n100,000 lines ({len(body):,} bytes) read and checked in {elapsed:.2f}s; longest loop stall "
        f"{max(gaps) * 1000:.0f} ms"
    )
    # The loop kept turning while the body was read: parsed on it, the ticker would run once or twice. (How long a
    # turn took is a figure, printed above, not a pass/fail: it depends on the machine's load.)
    assert len(gaps) >= 20


HOOK = "https://hooks.example.com/h?token=hook-SEKRET-9f3a"
WEBHOOK_HEADER = "X-MCP-Batch-Webhook-URL"


@pytest.fixture
def hooked(settings: Settings) -> Settings:
    update = {"webhook_allow": ["https://hooks.example.com/"], "webhook_secret": SecretStr("signing-key")}
    return settings.model_copy(update=update)


async def test_an_uploads_webhook_url_goes_in_a_header_and_never_in_the_query(hooked: Settings) -> None:
    body = lines({"server": "demo", "tool": "echo"})
    async with running_api(hooked) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        queried = await client.post("/v1/batches", content=body, headers=NDJSON, params={"webhook_url": HOOK})
        ((loc, msg),) = problems(queried)
        assert loc == ["query", "webhook_url"] and WEBHOOK_HEADER in msg
        assert "hook-SEKRET" not in queried.text
        dry = await client.post("/v1/batches:validate", content=body, headers=NDJSON, params={"webhook_url": HOOK})
        assert problems(dry)[0][0] == ["query", "webhook_url"]
        sent = await client.post("/v1/batches", content=body, headers={**NDJSON, WEBHOOK_HEADER: HOOK})
        assert sent.status_code == 202, sent.text
        assert sent.json()["webhook"] == {"status": "pending", "attempts": 0}
        outside = {**NDJSON, WEBHOOK_HEADER: "https://elsewhere.example/h"}  # refused by the allow-list, named
        (refused,) = problems(await client.post("/v1/batches", content=body, headers=outside))
        assert refused[0] == ["header", WEBHOOK_HEADER]
        as_json = await client.post(
            "/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}]}, headers={WEBHOOK_HEADER: HOOK}
        )
        assert problems(as_json)[0][0] == ["header", WEBHOOK_HEADER]  # a JSON body carries its own
