"""What an item's timing figures measure, and sessions opened when a worker starts: through the real API, worker and
a stdio backend."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.support import eventually, run_batch, running_api, running_worker
from worker.context import state

pytestmark = [pytest.mark.timeout(90), pytest.mark.serial]  # its assertions are durations

ECHOES = [{"id": f"e{i}", "server": "demo", "tool": "echo", "arguments": {"message": "hi"}} for i in range(2)]


def span(item: dict[str, object]) -> float:
    started, finished = (datetime.fromisoformat(str(item[k])) for k in ("started_at", "finished_at"))
    return (finished - started).total_seconds()


async def test_an_item_that_waited_for_its_session_says_how_long(client: httpx.AsyncClient) -> None:
    first, second = (await run_batch(client, ECHOES, mode="serial"))["results"]
    assert first["connect_seconds"] > 0  # a stdio process started for it (forked: it can take under 50 ms)
    assert second.get("connect_seconds") is None  # the session was open
    for item in (first, second):
        parts = item.get("connect_seconds") or 0, item["rate_wait_seconds"], item["elapsed_seconds"]
        assert sum(parts) <= span(item) + 0.01  # the figures are parts of the item's time on its worker
    assert span(first) - first["connect_seconds"] < 1  # the call alone, without the session's start


async def test_a_worker_opens_the_configured_sessions_in_the_background_when_it_starts(settings: Settings) -> None:
    warm = settings.model_copy(update={"warm_sessions": True})
    async with running_api(warm) as base_url, running_worker(warm) as worker:  # started: no session waited for
        pool = state(worker.ctx).pool
        await eventually(lambda: pool.ready("demo") and pool.ready("demo_http"), what="both sessions open")
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            document = await run_batch(client, ECHOES[:1])
    assert document["results"][0].get("connect_seconds") is None  # the first batch found its session open
