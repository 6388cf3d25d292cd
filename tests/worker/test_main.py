"""The worker process: pick-up woken by Redis, not by arq's poll delay."""

from __future__ import annotations

import httpx

from tests.support import ServiceHandle, submit


async def test_an_idle_worker_picks_up_new_work_at_once(service: ServiceHandle, client: httpx.AsyncClient) -> None:
    assert service.settings.worker_idle_poll_seconds == 30  # without the wake-up, pick-up would wait this long
    for _ in range(3):  # the first may meet the worker's first poll; the others need the wake-up
        batch_id = (await submit(client, [{"server": "demo_http", "tool": "echo"}]))["id"]
        document = (await client.get(f"/v1/batches/{batch_id}", params={"wait": 10})).json()
        assert document["status"] == "completed"
