"""The worker process: pick-up woken by Redis, not by arq's poll delay."""

from __future__ import annotations

import asyncio

import httpx

from tests.support import ServiceHandle, submit


async def test_an_idle_worker_picks_up_new_work_at_once(service: ServiceHandle, client: httpx.AsyncClient) -> None:
    assert service.settings.worker_idle_poll_seconds == 30  # without the wake-up, pick-up would wait this long
    await asyncio.sleep(0)  # let the worker reach its idle wait
    for _ in range(3):
        batch_id = (await submit(client, [{"server": "demo_http", "tool": "echo"}]))["id"]
        document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 10})).json()
        assert document["status"] == "completed"
