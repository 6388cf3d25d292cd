"""`Idempotency-Key` on POST /v1/batches: one batch per key and request, through the real API, worker and Redis."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from mcp_batch.store import idempotency
from mcp_batch.store.idempotency import fingerprint
from tests.support import ServiceHandle, finished, submit

pytestmark = pytest.mark.timeout(90)

SECRET = "hunter2-secret-value"
CALLS = [{"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": "hi"}}]


def post(client: httpx.AsyncClient, key: str | bytes, calls: list[dict[str, Any]] = CALLS) -> Any:
    return client.post("/v1/batches", json={"calls": calls}, headers={"Idempotency-Key": key})


async def batches(redis: aioredis.Redis) -> list[str]:
    """Ids of the batches stored (their meta hashes)."""
    names = [name.decode() async for name in redis.scan_iter("mcpb:batch:*")]
    return sorted(name.split(":")[2].strip("{}") for name in names if name.count(":") == 2)


async def idem_keys(redis: aioredis.Redis) -> list[bytes]:
    return [name async for name in redis.scan_iter("mcpb:idem:*")]


async def test_the_same_key_and_body_answer_200_with_the_first_batch(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    first = await post(client, "order-42")
    again = await post(client, "order-42")
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"] == f"/v1/batches/{first.json()['id']}"
    assert set(again.json()) == set(first.json())  # the same document shape as the 202
    assert await batches(redis) == [first.json()["id"]]


async def test_a_replay_after_the_batch_finished_answers_with_its_results(client: httpx.AsyncClient) -> None:
    first = await post(client, "k")
    done = await finished(client, first.json()["id"])
    again = await post(client, "k")
    assert again.status_code == 200
    assert again.json()["status"] == "completed" and again.json()["counts"] == done["counts"]
    assert (await client.get(again.headers["location"])).json()["results"] == done["results"]


async def test_the_same_key_with_a_different_body_is_409_without_echoing_it(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    first = await post(client, "k")
    other = await post(client, "k", [{"server": "demo", "tool": "echo", "arguments": {"message": SECRET}}])
    assert other.status_code == 409
    assert "different request" in other.json()["detail"] and SECRET not in other.text
    assert await batches(redis) == [first.json()["id"]]


async def test_concurrent_posts_with_one_key_make_one_batch(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    answers = await asyncio.gather(*(post(client, "race") for _ in range(5)))
    assert all(a.status_code in (200, 202) for a in answers), [a.text for a in answers]
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 200, 202]
    assert len({a.json()["id"] for a in answers}) == 1
    assert await batches(redis) == [answers[0].json()["id"]]
    assert await redis.zcard("mcpb:queue") <= 1  # one job at most (the worker may have taken it already)


async def test_different_keys_make_different_batches(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    one, two = await post(client, "one"), await post(client, "two")
    assert one.status_code == two.status_code == 202
    assert one.json()["id"] != two.json()["id"]
    assert len(await batches(redis)) == 2


async def test_without_a_key_every_post_makes_a_batch(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    one, two = await submit(client, CALLS), await submit(client, CALLS)
    assert one["id"] != two["id"] and not await idem_keys(redis)


@pytest.mark.parametrize("key", ["x" * 201, "", b"caf\xc3\xa9", "tab\there"], ids=["long", "empty", "utf8", "tab"])
async def test_a_malformed_key_is_422_naming_the_header(
    client: httpx.AsyncClient, redis: aioredis.Redis, key: str | bytes
) -> None:
    answer = await post(client, key)
    assert answer.status_code == 422
    [problem] = answer.json()["detail"]
    assert problem["loc"] == ["header", "Idempotency-Key"] and "Idempotency-Key" in problem["msg"]
    assert not await batches(redis) and not await idem_keys(redis)


async def test_the_longest_key_is_accepted(client: httpx.AsyncClient) -> None:
    assert (await post(client, "~" * 200)).status_code == 202


async def test_a_batch_that_cannot_be_created_leaves_no_key(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    duplicate = [{"id": "a", "server": "demo", "tool": "echo"}, {"id": "A", "server": "demo", "tool": "echo"}]
    assert (await post(client, "k", duplicate)).status_code == 422
    assert not await idem_keys(redis) and not await batches(redis)
    assert (await post(client, "k")).status_code == 202  # the key is still free


async def test_the_key_lives_as_long_as_its_batch(
    client: httpx.AsyncClient, redis: aioredis.Redis, service: ServiceHandle
) -> None:
    batch_id = (await post(client, "k")).json()["id"]
    await finished(client, batch_id)  # while it runs both live on; once it ends, both expire after its retention
    [name] = await idem_keys(redis)
    assert name.decode() == Keys().idempotency("k")
    assert await redis.hget(Keys().batch(batch_id), "idempotency_key") == name
    key_ttl, batch_ttl = await redis.pttl(name), await redis.pttl(Keys().batch(batch_id))
    retention_ms = service.settings.retention_seconds * 1000
    assert abs(key_ttl - batch_ttl) < 5_000 and retention_ms - 10_000 < key_ttl <= retention_ms
    assert json.loads(await redis.get(name)) == {"batch_id": batch_id, "fingerprint": body_fingerprint(CALLS)}


async def test_a_key_whose_batch_is_gone_makes_a_new_batch(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    first = (await post(client, "k")).json()["id"]
    await finished(client, first)
    await redis.delete(*[name async for name in redis.scan_iter(f"mcpb:batch:{{{first}}}*")])
    again = await post(client, "k")
    assert again.status_code == 202 and again.json()["id"] != first


async def test_a_request_meeting_the_first_in_progress_answers_with_its_batch(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    # The first request's placeholder, as if it were still storing the batch it made without a key.
    stored = await submit(client, CALLS)
    name, digest = Keys().idempotency("k"), body_fingerprint(CALLS)
    await redis.set(name, json.dumps({"fingerprint": digest, "token": "first"}), px=30_000)
    second = asyncio.create_task(post(client, "k"))
    await redis.set(name, json.dumps({"batch_id": stored["id"], "fingerprint": digest}), px=30_000)
    answer = await second
    assert answer.status_code == 200 and answer.json()["id"] == stored["id"]


async def test_a_request_still_in_progress_after_the_wait_is_409(
    client: httpx.AsyncClient, redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.3)  # the service runs in this process
    name = Keys().idempotency("k")
    await redis.set(name, json.dumps({"fingerprint": body_fingerprint(CALLS), "token": "first"}), px=30_000)
    answer = await post(client, "k")
    assert answer.status_code == 409 and "in progress" in answer.json()["detail"]
    assert not await batches(redis)


def body_fingerprint(calls: list[dict[str, Any]]) -> str:
    return fingerprint(BatchRequest.model_validate({"calls": calls}).model_dump(mode="json"))
