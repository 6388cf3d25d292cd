"""A worker that dies while its call waits for an answer: the item follows the rules for any call in flight (real
worker processes, SIGKILL). A read-only tool runs again on the worker that takes over, and its backend asks again
(a new question); a tool that may write ends `interrupted`, and its question is no longer shown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import (
    by_id,
    crash,
    eventually,
    finished,
    live_workers,
    running_api,
    running_worker,
    submit,
    worker_processes,
)
from tests.third_party import everything_stdio

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

ASK = {"policy": "ask", "wait_seconds": 60.0}


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=90) as http:
        yield http


async def waiting(api: httpx.AsyncClient, batch_id: str, count: int, not_: str = "") -> dict[str, str]:
    """Item id -> question id, once `count` items wait for an answer (none of them question `not_`)."""

    async def asked() -> dict[str, str] | None:
        response = await api.get(f"/v1/batches/{batch_id}/questions")
        assert response.status_code == 200, response.text
        found = response.json()["questions"]
        ids = {q["item_id"]: q["input_request"]["id"] for q in found}
        return ids if len(ids) == count and not_ not in ids.values() else None

    return await eventually(asked, what=f"{count} questions of batch {batch_id}", timeout=60)


async def test_a_worker_killed_while_questions_wait_leaves_their_items_to_the_rules_for_calls_in_flight(
    api: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"lease_seconds": 2.0, "sweep_seconds": 0.2})
    calls = [
        {"id": "read", "server": "demo", "tool": "ask_round"},  # read-only: run again
        {"id": "write", "server": "everything", "tool": "trigger-elicitation-request"},  # may write: not again
    ]
    with worker_processes(settings, 1, tmp_path) as (victim,):
        await live_workers(redis, 1)
        batch_id = (await submit(api, calls, read_only=False, questions=ASK))["id"]
        first = await waiting(api, batch_id, 2)
        crash(victim)  # and its backends: server-everything outlives a closed stdin
    async with running_worker(settings):
        again = await waiting(api, batch_id, 1, not_=first["read"])
        assert list(again) == ["read"]  # asked again: a new question (the old one is shown until then)
        answer = {"action": "accept", "content": {"go": True}}
        assert (await api.post(f"/v1/batches/{batch_id}/items/read/input", json=answer)).status_code == 200
        items = by_id(await finished(api, batch_id))
    assert items["read"]["status"] == "ok" and items["read"]["recovered"] is True
    assert items["write"]["status"] == "interrupted" and items["write"]["error"]["code"] == "interrupted"
    stale = await api.post(f"/v1/batches/{batch_id}/items/write/input", json={"action": "decline"})
    assert stale.status_code == 409
