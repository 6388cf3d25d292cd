"""Malformed batches are rejected whole with 422, naming the call and field, echoing no values, queueing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import running_service

SECRET = "s3cr3t-value-never-echoed"


async def assert_nothing_stored(redis: aioredis.Redis) -> None:
    assert await redis.keys("mcpb:batch:*") == []
    assert await redis.zcard("mcpb:queue") == 0


async def post(client: httpx.AsyncClient, body: Any) -> httpx.Response:
    return await client.post("/v1/batches", json=body)


async def test_empty_calls_is_rejected(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    response = await post(client, {"calls": []})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "calls"]
    await assert_nothing_stored(redis)


async def test_duplicate_ids_name_both_calls(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    calls = [{"id": "x", "server": "demo", "tool": "echo"}, {"server": "demo", "tool": "echo"}]
    calls.append({"id": "x", "server": "demo", "tool": "echo"})
    calls.append({"id": "1", "server": "demo", "tool": "echo"})  # collides with call 1's default id
    response = await post(client, {"calls": calls})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert [d["loc"] for d in detail] == [["body", "calls", 2, "id"], ["body", "calls", 3, "id"]]
    assert "call 0" in detail[0]["msg"] and "call 1" in detail[1]["msg"]
    await assert_nothing_stored(redis)


async def test_too_many_calls_is_rejected(tmp_path: Path, settings: Settings, redis: aioredis.Redis) -> None:
    small = settings.model_copy(update={"max_calls_per_batch": 3})
    async with running_service(small) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        response = await post(client, {"calls": [{"server": "demo", "tool": "echo"}] * 4})
    assert response.status_code == 422
    assert "maximum of 3" in response.json()["detail"][0]["msg"]
    await assert_nothing_stored(redis)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"calls": [{"server": "demo", "tool": "echo", "arguments": SECRET}]}, ["body", "calls", 0, "arguments"]),
        ({"calls": [{"server": "demo", "tool": "echo", "arguments": [SECRET]}]}, ["body", "calls", 0, "arguments"]),
        ({"calls": [{"server": "demo", "arguments": {"k": SECRET}}]}, ["body", "calls", 0, "tool"]),
        ({"calls": [{"id": "x" * 101, "server": "demo", "tool": "echo"}]}, ["body", "calls", 0, "id"]),
        ({"calls": [{"server": "demo", "tool": "echo", SECRET: 1}]}, ["body", "calls", 0, SECRET]),
        ({"calls": [{"server": "demo", "tool": "echo"}], "mode": SECRET}, ["body", "mode"]),
        ({"calls": [{"server": "demo", "tool": "echo"}], "max_concurrency": 0}, ["body", "max_concurrency"]),
        ({"calls": [{"server": "demo", "tool": "echo"}], "max_concurrency": 100_000}, ["body", "max_concurrency"]),
    ],
)
async def test_malformed_fields_are_named_without_their_values(
    client: httpx.AsyncClient, redis: aioredis.Redis, body: dict[str, Any], loc: list[Any]
) -> None:
    response = await post(client, body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == loc
    if loc[-1] != SECRET:  # an unknown field's name is its location, not a value
        assert SECRET not in response.text
    await assert_nothing_stored(redis)


async def test_a_body_that_is_not_json_is_422(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    response = await client.post("/v1/batches", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422
    await assert_nothing_stored(redis)
