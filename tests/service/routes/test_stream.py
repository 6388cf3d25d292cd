"""The progress stream (Server-Sent Events) through the real API and worker: items once in finish order, the end,
resuming with Last-Event-ID, the time limit, keep-alives, and a storage error mid-stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.support import run_batch, running_service, submit

pytestmark = pytest.mark.timeout(60)

ITEM_FIELDS = {"seq", "index", "id", "status", "server", "tool", "finished_at", "elapsed_seconds"}


@dataclass
class Sse:
    event: str  # "comment" for a `:` line
    data: Any = None
    id: str | None = None


async def sse(response: httpx.Response) -> AsyncIterator[Sse]:
    """The events of an open text/event-stream response, as they arrive."""
    event: Sse | None = None
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield Sse("comment", line[1:].strip())
        elif line == "":
            if event is not None:
                yield event
            event = None
        else:
            field, _, value = line.partition(": ")
            event = event or Sse("message")
            if field == "event":
                event.event = value
            elif field == "id":
                event.id = value
            elif field == "data":
                event.data = json.loads(value)


async def stream(
    client: httpx.AsyncClient, batch_id: str, headers: dict[str, str] | None = None, **params: Any
) -> list[Sse]:
    """Every event of one stream, until the server closes it."""
    async with (
        asyncio.timeout(30),
        client.stream("GET", f"/v1/batches/{batch_id}/events", headers=headers, params=params) as response,
    ):
        assert response.status_code == 200
        return [event async for event in sse(response)]


def sleeps(n: int, seconds: float) -> list[dict[str, Any]]:
    call = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": seconds}}
    return [{"id": f"s{i}", **call} for i in range(n)]


def items(events: list[Sse]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.event == "item"]


async def test_a_running_batch_streams_every_item_once_in_seq_order_then_end(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, sleeps(6, 0.2), max_concurrency=2))["id"]
    async with (
        asyncio.timeout(30),
        client.stream("GET", f"/v1/batches/{batch_id}/events") as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        events = [event async for event in sse(response)]
    assert events[0].event == "progress" and events[0].data["status"] in ("queued", "running")
    streamed = items(events)
    assert [item["seq"] for item in streamed] == [1, 2, 3, 4, 5, 6]
    assert sorted(item["index"] for item in streamed) == list(range(6))
    assert all(set(item) == ITEM_FIELDS and item["status"] == "ok" for item in streamed)
    assert [e.id for e in events if e.event == "item"] == ["1", "2", "3", "4", "5", "6"]
    assert all(e.id is None for e in events if e.event != "item")
    assert events[-1].event == "end"
    assert events[-1].data["status"] == "completed" and events[-1].data["ok"] is True
    assert events[-1].data["counts"]["succeeded"] == 6 and events[-1].data["finished_at"]
    progress = [e.data for e in events if e.event == "progress"]
    assert progress[-1]["counts"]["succeeded"] == 6  # the counts follow the items


async def test_resuming_with_last_event_id_yields_only_later_items(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, sleeps(5, 0.3), max_concurrency=1))["id"]
    first: list[dict[str, Any]] = []
    async with (
        asyncio.timeout(30),
        client.stream("GET", f"/v1/batches/{batch_id}/events") as response,
    ):
        async for event in sse(response):
            if event.event == "item":
                first.append(event.data)
                if len(first) == 2:
                    break  # the client goes away mid-batch
    events = await stream(client, batch_id, headers={"Last-Event-ID": "2"})
    assert [item["seq"] for item in items(events)] == [3, 4, 5]
    assert {item["id"] for item in first + items(events)} == {f"s{i}" for i in range(5)}
    assert events[-1].event == "end" and events[-1].data["status"] == "completed"
    later = await stream(client, batch_id, headers={"Last-Event-ID": "4"}, after=1)  # the header wins
    assert [item["seq"] for item in items(later)] == [5]
    assert [item["seq"] for item in items(await stream(client, batch_id, after=3))] == [4, 5]


async def test_a_finished_batch_streams_all_its_items_then_end_at_once(client: httpx.AsyncClient) -> None:
    calls = [{"id": f"e{i}", "server": "demo", "tool": "echo"} for i in range(4)]
    calls.append({"id": "bad", "server": "demo", "tool": "fail"})
    document = await run_batch(client, calls)
    loop = asyncio.get_running_loop()
    started = loop.time()
    events = await stream(client, document["id"])
    assert loop.time() - started < 2  # no wait for a check interval or the done channel
    assert [item["seq"] for item in items(events)] == [1, 2, 3, 4, 5]
    assert {item["id"]: item["status"] for item in items(events)}["bad"] == "error"
    # The counts first, then the items that finished before the client connected, then the end.
    assert [e.event for e in events] == ["progress"] + ["item"] * 5 + ["end"]
    assert events[0].data["counts"] == document["counts"]
    end = events[-1].data
    assert end["status"] == "completed" and end["ok"] is False
    assert end["counts"] == document["counts"] and end["finished_at"] == document["finished_at"]


async def test_an_unknown_batch_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/batches/nope/events")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert "not found" in response.json()["detail"]


async def test_a_malformed_last_event_id_is_400_naming_the_header(client: httpx.AsyncClient) -> None:
    batch_id = (await submit(client, [{"server": "demo", "tool": "echo"}]))["id"]
    for value in ("abc", "-1", "1.5", "9" * 30):
        response = await client.get(f"/v1/batches/{batch_id}/events", headers={"Last-Event-ID": value})
        assert response.status_code == 400
        assert response.json()["detail"][0]["loc"] == ["header", "Last-Event-ID"]
        assert value not in response.text


async def test_the_stream_ends_with_timeout_at_its_time_limit(settings: Settings) -> None:
    settings = settings.model_copy(update={"events_max_seconds": 0.5})
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        batch_id = (await submit(client, [{"id": "e", "server": "demo_http", "tool": "echo"}, *sleeps(1, 30)]))["id"]
        events = await stream(client, batch_id)
        assert events[-1].event == "timeout"
        assert events[-1].data["after"] == len(items(events))
        assert "Last-Event-ID" in events[-1].data["detail"]
        await client.post(f"/v1/batches/{batch_id}/cancel")


async def test_a_quiet_stream_sends_keep_alive_comments(settings: Settings) -> None:
    settings = settings.model_copy(update={"events_heartbeat_seconds": 0.2, "cancel_grace_seconds": 0})
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        batch_id = (await submit(client, sleeps(1, 30)))["id"]
        seen: list[Sse] = []
        async with (
            asyncio.timeout(30),
            client.stream("GET", f"/v1/batches/{batch_id}/events") as response,
        ):
            async for event in sse(response):
                seen.append(event)
                if [e.event for e in seen].count("comment") == 2:
                    await client.post(f"/v1/batches/{batch_id}/cancel")
        assert {"event": "comment", "data": "keep-alive"} in [{"event": e.event, "data": e.data} for e in seen]
        assert seen[-1].event == "end" and seen[-1].data["status"] == "cancelled"


async def test_a_storage_error_mid_stream_ends_it_with_an_error_event(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    batch_id = (await submit(client, sleeps(1, 30)))["id"]
    batch_key = Keys().batch(batch_id)
    async with (
        asyncio.timeout(30),
        client.stream("GET", f"/v1/batches/{batch_id}/events") as response,
    ):
        events = sse(response)
        assert (await anext(events)).event == "progress"
        await redis.rename(batch_key, f"{batch_key}:aside")
        await redis.set(batch_key, "not a hash")  # every read of it is now a Redis error (WRONGTYPE)
        error = await anext(events)
        rest = [event async for event in events]
    await redis.delete(batch_key)
    await redis.rename(f"{batch_key}:aside", batch_key)
    assert error.event == "error" and error.data == {"detail": "storage unavailable"}
    assert rest == []
    await client.post(f"/v1/batches/{batch_id}/cancel")
