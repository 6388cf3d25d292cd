"""`DELETE /v1/batches/{id}` through the real API and worker: a running batch is a 409 naming its status and the
cancel route; an ended one answers 204, then 404, and is gone from the list, its metadata filter and its
Idempotency-Key."""

from __future__ import annotations

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from tests.support import finished, run_batch, submit

pytestmark = pytest.mark.timeout(90)

ECHO = {"server": "demo", "tool": "echo"}
SLOW = {"server": "demo", "tool": "sleep", "arguments": {"seconds": 30}}


async def test_a_running_batch_is_a_409_naming_its_status_and_the_cancel_route(client: httpx.AsyncClient) -> None:
    running = await submit(client, [SLOW])
    response = await client.delete(f"/v1/batches/{running['id']}")
    assert response.status_code == 409
    body = response.json()
    assert body["status"] in {"queued", "running"} and body["cancel"] == f"/v1/batches/{running['id']}/cancel"
    assert body["status"] in body["detail"] and "/cancel" in body["detail"]
    assert (await client.get(f"/v1/batches/{running['id']}")).status_code == 200
    assert (await client.post(f"/v1/batches/{running['id']}/cancel")).status_code == 200
    await finished(client, running["id"])
    assert (await client.delete(f"/v1/batches/{running['id']}")).status_code == 204


async def test_an_ended_batch_answers_204_then_404_and_is_gone_everywhere(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    headers = {"Idempotency-Key": "nightly-2026-12-01"}
    body = {"calls": [ECHO], "metadata": {"job": "nightly"}}
    first = await client.post("/v1/batches", json=body, headers=headers)
    batch_id = first.json()["id"]
    await finished(client, batch_id)
    other = await run_batch(client, [ECHO], metadata={"job": "nightly"})
    response = await client.delete(f"/v1/batches/{batch_id}")
    assert response.status_code == 204 and response.content == b""
    assert (await client.get(f"/v1/batches/{batch_id}")).status_code == 404
    assert (await client.delete(f"/v1/batches/{batch_id}")).status_code == 404
    assert [b["id"] for b in (await client.get("/v1/batches")).json()["batches"]] == [other["id"]]
    filtered = (await client.get("/v1/batches", params={"metadata.job": "nightly"})).json()["batches"]
    assert [b["id"] for b in filtered] == [other["id"]]
    assert [key for key in await redis.keys("mcpb:batch:*") if batch_id.encode() in key] == []
    assert await redis.hget(Keys().tenant_stored_sizes("default"), batch_id) is None
    again = await client.post("/v1/batches", json=body, headers=headers)  # the key is free: a new batch
    assert again.status_code == 202 and again.json()["id"] != batch_id
