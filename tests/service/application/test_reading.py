"""Reading a batch writes nothing: a batch past its deadline reads as expired on every door while no worker runs (the
hash still says what it said), and the first worker to look at it records its end."""

from __future__ import annotations

import time

import httpx
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.support import eventually, running_api, running_worker, submit


async def stored_status(redis: aioredis.Redis, batch_id: str) -> str:
    return (await redis.hget(Keys().batch(batch_id), "status") or b"").decode()


async def test_a_batch_past_its_deadline_reads_as_expired_and_only_a_worker_records_it(
    settings: Settings, redis: aioredis.Redis
) -> None:
    calls = [{"id": f"c{i}", "server": "demo_http", "tool": "echo"} for i in range(3)]
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        batch_id = (await submit(client, calls, deadline_seconds=0.5))["id"]
        started = time.monotonic()
        answer = await client.get(f"/v1/batches/{batch_id}", params={"wait": 10})
        assert answer.status_code == 200, answer.text
        document = answer.json()
        assert time.monotonic() - started < 5  # the long poll woke at the deadline, not at the end of its wait
        assert document["status"] == "expired" and document["finished_at"] == document["deadline_at"]
        assert document["counts"]["expired"] == 3 and [item["seq"] for item in document["results"]] == [1, 2, 3]
        assert await stored_status(redis, batch_id) == "queued"  # the read wrote nothing
        lines = (await client.get(f"/v1/batches/{batch_id}/results")).text.splitlines()
        assert len(lines) == 3 and all('"status":"expired"' in line for line in lines)
        events = (await client.get(f"/v1/batches/{batch_id}/events")).text
        assert "event: end" in events and '"status":"expired"' in events
        listed = (await client.get("/v1/batches")).json()["batches"]
        assert [(b["id"], b["status"]) for b in listed] == [(batch_id, "expired")]
        assert await stored_status(redis, batch_id) == "queued"

        async def recorded() -> bool:
            return await stored_status(redis, batch_id) == "expired"

        async with running_worker(settings):
            await eventually(recorded, what="a worker to record the expiry", timeout=10)
        after = (await client.get(f"/v1/batches/{batch_id}")).json()
        assert after["status"] == "expired" and after["counts"]["expired"] == 3
