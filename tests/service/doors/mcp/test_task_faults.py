"""Tasks when things go wrong: Redis down answers an internal error (never a `failed` task, nothing of the batch in
the message), and a client that hangs up while waiting does not cancel its batch (raw JSON-RPC over httpx)."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.redis_server import RedisServer
from tests.service.doors.mcp.wire import call_tool, get_task
from tests.support import ServiceHandle, eventually, finished, running_service
from tests.test_redis_faults import settings_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

SLOW = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 2.5}}


async def test_a_task_request_while_redis_is_down_is_an_internal_error(
    own_redis: RedisServer, servers: dict[str, Any], tmp_path: Path
) -> None:
    settings = settings_for(own_redis, tmp_path, servers)
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        task_id = (await call_tool(http, "submit_batch", {"calls": [SLOW]})).result["taskId"]
        await own_redis.stop()
        reply = await get_task(http, task_id)
        await own_redis.start()
    assert reply.error == {"code": -32603, "message": "storage unavailable, try again shortly"}
    assert task_id not in reply.error["message"]


async def test_a_client_hanging_up_during_the_short_wait_does_not_cancel_the_batch(
    service: ServiceHandle, settings: Settings
) -> None:
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:

        async def listed() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = (await http.get("/v1/batches")).json()["batches"]
            return found

        async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as caller:
            waiting = asyncio.create_task(call_tool(caller, "call_tools_batch", {"calls": [SLOW]}))
            # hang up once the batch is stored and its call still runs: in the middle of the short wait (a
            # hang-up before the request reached the route would test nothing)
            batches = await eventually(listed, what="the batch listed", timeout=20)
            assert not waiting.done()
            waiting.cancel()
            with suppress(asyncio.CancelledError):
                await waiting
        [batch] = batches
        document = await finished(http, batch["id"])
        assert document["status"] == "completed" and document["ok"] is True
        assert (await get_task(http, batch["id"])).result["status"] == "completed"
