"""Pushed task status: `subscriptions/listen` with `taskIds` on the MCP door, raw JSON-RPC over streamable HTTP.
A client listening on one API process hears about a task submitted and cancelled through another (two real
`mcp-batch api` processes on one Redis); another tenant's task id is refused as an unknown one; a key's cap holds
across API processes, a killed process's listens lapse, and a client that hangs up frees its slot. These tests also
guard what listen.py relies on in the SDK: its middleware sees the listen first, and the session sends a
`notifications/tasks` it has no type for."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from mcp_batch.store import Store
from mcp_batch.tenants import ANYONE, hash_key
from tests.service.doors.mcp.wire import VERSION, call_tool, cancel_task, envelope, rpc
from tests.support import api_process, api_process_handle, eventually, running_service, running_worker

pytestmark = pytest.mark.timeout(120)

SLOW = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 8}}
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
ALPHA, BETA = "mcpb_alpha-key", "mcpb_beta-key"
NOT_FOUND = "Failed to retrieve task: Task not found"
_ids = itertools.count(1_000)


async def listen(http: httpx.AsyncClient, task_ids: list[str]) -> AsyncIterator[dict[str, Any]]:
    """Each JSON-RPC message of one listen's response stream, as it arrives."""
    params = {"notifications": {"taskIds": task_ids}, "_meta": envelope(True)}
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": "subscriptions/listen", "params": params}
    headers = {
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "subscriptions/listen",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with http.stream("POST", "/mcp/", content=json.dumps(body), headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                yield json.loads(line.removeprefix("data: "))


async def test_a_listener_on_one_api_process_hears_a_task_cancelled_through_another(
    settings: Settings, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # The API processes start first: their start-up blocks this loop, which the in-loop worker must not share.
    with api_process(settings, tmp_path / "a") as first, api_process(settings, tmp_path / "b") as second:
        one = httpx.AsyncClient(base_url=first, timeout=60)
        two = httpx.AsyncClient(base_url=second, timeout=60)
        async with running_worker(settings), one, two:
            task_id = (await call_tool(one, "submit_batch", {"calls": [SLOW, SLOW]})).result["taskId"]
            seen: list[dict[str, Any]] = []
            async for message in listen(two, [task_id]):
                seen.append(message)
                if message.get("method") == "notifications/tasks" and len(seen) == 2:  # its first status
                    assert message["params"]["status"] == "working"
                    assert (await cancel_task(one, task_id)).status == 200
    ack, *notes, end = seen
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    subscription = ack["params"]["_meta"][SUBSCRIPTION]
    assert all(n["method"] == "notifications/tasks" and n["params"]["taskId"] == task_id for n in notes)
    assert all(n["params"]["_meta"][SUBSCRIPTION] == subscription for n in notes)
    assert notes[0]["params"]["status"] == "working" and notes[-1]["params"]["status"] == "cancelled"
    assert end["id"] == subscription and end["result"]["_meta"][SUBSCRIPTION] == subscription


async def test_another_tenants_task_id_is_refused_as_an_unknown_one(settings: Settings, tmp_path: Path) -> None:
    keys = [
        {"sha256": hash_key(ALPHA), "tenant": "alpha", "write": True},
        {"sha256": hash_key(BETA), "tenant": "beta"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    keyed = settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json"})
    async with running_service(keyed) as service:
        alpha = httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {ALPHA}"}, timeout=60)
        beta = httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {BETA}"}, timeout=60)
        async with alpha, beta:
            task_id = (await call_tool(alpha, "submit_batch", {"calls": [SLOW]})).result["taskId"]
            theirs = await rpc(beta, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
            unknown = await rpc(beta, "subscriptions/listen", {"notifications": {"taskIds": ["0" * 32]}})
            assert (
                theirs.error == unknown.error == {"code": -32602, "message": "Failed to retrieve task: Task not found"}
            )
            too_many = await rpc(alpha, "subscriptions/listen", {"notifications": {"taskIds": ["a"] * 101}})
            assert too_many.error["code"] == -32602 and "taskIds" in too_many.error["message"]
            assert (await cancel_task(alpha, task_id)).status == 200


async def test_a_key_holds_at_most_its_listens_open_and_may_open_another_once_one_ends(settings: Settings) -> None:
    capped = settings.model_copy(update={"mcp_listens_per_key": 2})
    async with running_service(capped) as service, httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        task_id = (await call_tool(http, "submit_batch", {"calls": [SLOW]})).result["taskId"]
        heard = [asyncio.Event(), asyncio.Event()]

        async def follow(n: int) -> list[dict[str, Any]]:
            seen = []
            async for message in listen(http, [task_id]):
                seen.append(message)
                if message.get("method") == "notifications/tasks":
                    heard[n].set()
            return seen

        open_ones = [asyncio.create_task(follow(n)) for n in range(2)]
        for event in heard:
            await asyncio.wait_for(event.wait(), 30)
        refused = await rpc(http, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
        assert refused.error["code"] == -32600 and "MCP_BATCH_MCP_LISTENS_PER_KEY" in refused.error["message"]
        assert (await cancel_task(http, task_id)).status == 200
        ended = await asyncio.wait_for(asyncio.gather(*open_ones), 30)
        assert all(seen[-1]["result"] for seen in ended)  # both closed with the listen's result
        again = [message async for message in listen(http, [task_id])]  # a slot is free: heard to its end
        assert again[-2]["params"]["status"] == "cancelled" and "result" in again[-1]


async def test_a_keys_listen_cap_holds_across_api_processes_and_a_killed_ones_listens_lapse(
    settings: Settings, tmp_path: Path, redis: aioredis.Redis
) -> None:
    keys = [
        {"sha256": hash_key(ALPHA), "tenant": "alpha", "write": True},
        {"sha256": hash_key(BETA), "tenant": "alpha"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    update = {"auth": "keys", "keys": tmp_path / "keys.json", "mcp_task_wait_seconds": 0}
    capped = settings.model_copy(update={**update, "mcp_listens_per_key": 2, "mcp_listen_lease_seconds": 1.0})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    alpha_open = Store(redis, capped.key_names, 60).listens.open
    auth = {"Authorization": f"Bearer {ALPHA}"}
    with api_process_handle(capped, tmp_path / "a") as (first, doomed), api_process(capped, tmp_path / "b") as second:
        one = httpx.AsyncClient(base_url=first, headers=auth, timeout=30)
        two = httpx.AsyncClient(base_url=second, headers=auth, timeout=30)
        beta = httpx.AsyncClient(base_url=second, headers={"Authorization": f"Bearer {BETA}"}, timeout=30)
        async with one, two, beta:
            task_id = (await call_tool(two, "submit_batch", {"calls": [SLOW]})).result["taskId"]  # no worker: queued

            async def follow(http: httpx.AsyncClient, heard: asyncio.Event) -> list[dict[str, Any]]:
                seen = []
                async for message in listen(http, [task_id]):
                    seen.append(message)
                    heard.set()
                return seen

            heard = [asyncio.Event() for _ in range(3)]
            killed = asyncio.create_task(follow(one, heard[0]))
            kept = asyncio.create_task(follow(two, heard[1]))
            await asyncio.wait_for(asyncio.gather(heard[0].wait(), heard[1].wait()), 20)
            for http in (one, two):  # one listen on each process: the key's two slots are taken on both
                refused = await rpc(http, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
                assert refused.error["code"] == -32600, refused.message
            other_key = asyncio.create_task(follow(beta, heard[2]))  # the cap is per key, not per tenant
            await asyncio.wait_for(heard[2].wait(), 20)
            doomed.kill()  # SIGKILL: its listen is never dropped, only left to lapse
            lapsed = "the killed process's listen lapsing"
            await eventually(lambda: _reaches(alpha_open, hash_key(ALPHA), 1), what=lapsed)
            again = asyncio.create_task(follow(two, asyncio.Event()))
            await eventually(lambda: _reaches(alpha_open, hash_key(ALPHA), 2), what="a listen in the freed slot")
            assert (await cancel_task(two, task_id)).status == 200
            for ended in await asyncio.wait_for(asyncio.gather(kept, other_key, again), 20):
                assert "result" in ended[-1]  # each closed with the listen's result
            with contextlib.suppress(httpx.TransportError):
                await killed


async def _reaches(count: Callable[[str], Awaitable[int]], holder: str, n: int) -> bool:
    return await count(holder) == n


async def test_a_listen_whose_client_hangs_up_frees_its_slot_at_once(settings: Settings, redis: aioredis.Redis) -> None:
    leased = settings.model_copy(update={"mcp_task_wait_seconds": 0, "mcp_listen_lease_seconds": 600})
    async with running_service(leased) as service, httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        task_id = (await call_tool(http, "submit_batch", {"calls": [SLOW]})).result["taskId"]  # no worker: queued
        listens = Store(redis, leased.key_names, 60).listens
        heard = asyncio.Event()
        hanging_up = httpx.AsyncClient(base_url=service.base_url, timeout=60)

        async def follow() -> None:
            async for _ in listen(hanging_up, [task_id]):
                heard.set()

        following = asyncio.create_task(follow())
        await asyncio.wait_for(heard.wait(), 20)
        assert await listens.open(ANYONE.holder) == 1
        following.cancel()
        await hanging_up.aclose()
        await eventually(lambda: _reaches(listens.open, ANYONE.holder, 0), what="the slot freed", timeout=10)
        assert (await cancel_task(http, task_id)).status == 200
