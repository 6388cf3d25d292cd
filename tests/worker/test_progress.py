"""A running item's progress, relayed from its backend's `notifications/progress`: on the REST item and the document
while it runs, gone once it ends, at most a bounded number of writes per second; and a backend's log lines in the
worker's own log, never in the document. Against server-everything and tests/chatty_backend.py (stdio)."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.store.progress import Progress
from tests.support import by_id, eventually, finished, submit
from tests.third_party import everything_stdio
from worker.progress import ProgressRelay

pytestmark = pytest.mark.timeout(90)

LONG_RUNNING = {"server": "everything", "tool": "trigger-long-running-operation"}


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    servers["chatty"] = {"command": sys.executable, "args": ["-m", "tests.chatty_backend"]}
    return servers


async def test_a_running_item_shows_its_backends_progress_until_it_ends(client: httpx.AsyncClient) -> None:
    calls = [{"id": "long", **LONG_RUNNING, "arguments": {"duration": 4, "steps": 4}}]
    batch = await submit(client, calls)

    async def progressed() -> dict[str, Any] | None:
        item = (await client.get(f"/v1/batches/{batch['id']}/items/long")).json()
        return item if item["status"] == "running" and item.get("progress") else None

    item = await eventually(progressed, what="the item's progress while it runs", timeout=30)
    assert item["progress"]["total"] == 4 and 1 <= item["progress"]["progress"] <= 4
    assert item["progress"]["updated_at"].endswith("+00:00")
    document = (await client.get(f"/v1/batches/{batch['id']}")).json()
    shown = by_id(document)["long"]
    assert shown["status"] == "ok" or shown["progress"]["total"] == 4
    done = by_id(await finished(client, batch["id"]))["long"]
    assert done["status"] == "ok" and "progress" not in done
    assert "progress" not in (await client.get(f"/v1/batches/{batch['id']}/items/long")).json()


async def test_a_backends_log_line_goes_to_the_worker_log_with_the_item_id(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="worker.backend_logs")
    calls = [{"id": "talker", "server": "chatty", "tool": "chatty", "arguments": {"reports": 2}}]
    document = await finished(client, (await submit(client, calls))["id"])
    item = by_id(document)["talker"]
    assert item["status"] == "ok" and "chatty reported" not in str(item)

    def logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "worker.backend_logs" and "chatty reported" in r.getMessage()]

    (record,) = await eventually(logged, what="the backend's log line in the worker's log", timeout=10)
    assert record.levelno == logging.DEBUG and "during item talker" in record.getMessage()


class CountedProgress(Progress):
    """The real store, counting its writes."""

    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        super().__init__(redis, keys)
        self.puts = 0

    async def put(self, batch_id: str, index: int, report: dict[str, Any]) -> None:
        self.puts += 1
        await super().put(batch_id, index, report)


async def test_progress_writes_are_bounded_per_second_and_the_latest_is_kept(redis: aioredis.Redis) -> None:
    store = CountedProgress(redis, Keys())
    relay = ProgressRelay(store, "b1", 3, "chatty", per_second=4)
    began = time.monotonic()
    for step in range(1, 301):  # 300 reports over about 0.6 s
        await relay(step, 300, f"step {step}")
        if step % 50 == 0:
            await asyncio.sleep(0.1)
    await eventually(lambda: store.puts and (store.puts > 1 or time.monotonic() - began > 1), what="the writes")
    reports = await eventually(lambda: _latest(store, 300), what="the last report stored", timeout=5)
    elapsed = time.monotonic() - began
    assert store.puts <= 2 + 4 * elapsed  # the first at once, then one per interval
    assert reports[3]["message"] == "step 300" and reports[3]["id"] == "chatty"
    await relay.close()
    assert await store.every("b1") == {}  # the call's end deletes it
    await relay(301, 300, "late")  # a notification after the end is dropped
    assert await store.every("b1") == {}


async def _latest(store: Progress, last: int) -> dict[int, dict[str, Any]] | None:
    reports = await store.every("b1")
    return reports if reports.get(3, {}).get("progress") == last else None


async def test_a_call_without_progress_makes_no_task_and_no_write(redis: aioredis.Redis) -> None:
    store = CountedProgress(redis, Keys())
    relay = ProgressRelay(store, "b1", 0, "quiet", per_second=4)
    await relay.close()
    assert store.puts == 0 and await redis.exists(Keys().progress("b1")) == 0
