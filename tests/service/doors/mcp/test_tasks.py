"""Batches as MCP tasks (SEP-2663) through the real service over streamable HTTP.

Task-aware requests are sent as raw JSON-RPC over httpx (wire.py: the test picks each request's `_meta` and
headers); the SDK `Client` is used where it can be, with the test's tasks extension (task_client.py) and in legacy
mode.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from mcp_batch.settings import Settings
from tests.service.doors.mcp.task_client import GetTask, TaskIdParams, Tasks
from tests.service.doors.mcp.wire import TASKS, call_tool, cancel_task, get_task, rpc
from tests.support import ServiceHandle, finished, run_batch

pytestmark = pytest.mark.timeout(120)

SLOW = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 2.5}}
ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"mcp_task_wait_seconds": 1.0, "mcp_task_poll_ms": 100})


@pytest.fixture
async def mcp(service: ServiceHandle) -> Any:
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        yield http


def task_of(result: dict[str, Any]) -> str:
    assert result["resultType"] == "task" and result["status"] == "working", result
    task_id: str = result["taskId"]
    return task_id


async def test_server_discover_advertises_the_extension_and_no_legacy_capability(
    mcp: httpx.AsyncClient, service: ServiceHandle
) -> None:
    capabilities = (await rpc(mcp, "server/discover", {})).result["capabilities"]
    assert capabilities["extensions"] == {TASKS: {}} and "tasks" not in capabilities
    async with Client(f"{service.base_url}/mcp/") as client:
        assert client.server_capabilities.extensions == {TASKS: {}}
    async with Client(f"{service.base_url}/mcp/", mode="legacy") as legacy:
        assert not legacy.server_capabilities.extensions  # the 2025-11-25 initialize result has no extensions


async def test_a_short_batch_is_answered_inline_to_a_client_that_takes_tasks(mcp: httpx.AsyncClient) -> None:
    await run_batch(mcp, [ECHO])  # the worker's session to the backend is open: an echo takes milliseconds
    result = (await call_tool(mcp, "call_tools_batch", {"calls": [ECHO]})).result
    assert result["resultType"] == "complete" and "taskId" not in result
    assert result["structuredContent"]["status"] == "completed" and result["isError"] is False


async def test_a_long_batch_is_a_task_polled_to_completed_with_the_result_call_tools_batch_gives(
    mcp: httpx.AsyncClient,
) -> None:
    created = (await call_tool(mcp, "call_tools_batch", {"calls": [SLOW, ECHO]})).result
    task_id = task_of(created)
    assert re.fullmatch(r"[0-9a-f]{32}", task_id)
    assert created["statusMessage"] == "1 of 2 calls finished" or created["statusMessage"] == "0 of 2 calls finished"
    working = (await get_task(mcp, task_id)).result  # at once: the batch was stored before the answer
    assert working["resultType"] == "complete" and working["status"] == "working" and "result" not in working
    assert (await mcp.get(f"/v1/batches/{task_id}")).json()["id"] == task_id  # the task is the batch, on REST too
    await finished(mcp, task_id)
    done = (await get_task(mcp, task_id)).result
    assert done["status"] == "completed" and done["statusMessage"] == "2 of 2 calls finished"
    direct = (await call_tool(mcp, "get_batch", {"batch_id": task_id})).result
    assert done["result"]["structuredContent"] == direct["structuredContent"]
    assert done["result"]["content"] == direct["content"] and done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["results"][0]["content"][0]["text"] == "slept 2.5s"


async def test_a_batch_whose_calls_failed_completes_with_is_error(mcp: httpx.AsyncClient) -> None:
    failing = {"server": "demo_http", "tool": "fail", "arguments": {}}
    task_id = task_of((await call_tool(mcp, "call_tools_batch", {"calls": [SLOW, failing]})).result)
    await finished(mcp, task_id)
    done = (await get_task(mcp, task_id)).result
    assert done["status"] == "completed" and done["statusMessage"] == "2 of 2 calls finished, 1 failed"
    assert done["result"]["isError"] is True and "error" not in done


async def test_a_client_without_the_capability_never_gets_a_task(mcp: httpx.AsyncClient) -> None:
    await rpc(mcp, "server/discover", {})  # declared on an earlier request: that does not count
    short_wait = await call_tool(mcp, "call_tools_batch", {"calls": [SLOW], "wait_seconds": 0.1}, tasks=False)
    assert short_wait.result["resultType"] == "complete"
    assert short_wait.result["structuredContent"]["status"] in {"queued", "running"}
    waited = (await call_tool(mcp, "call_tools_batch", {"calls": [SLOW]}, tasks=False)).result
    assert waited["structuredContent"]["status"] == "completed"  # today's behaviour: it waited for the end
    queued = (await call_tool(mcp, "submit_batch", {"calls": [SLOW]}, tasks=False)).result
    assert queued["resultType"] == "complete" and queued["structuredContent"]["status"] == "queued"
    legacy_task_param = {"name": "call_tools_batch", "arguments": {"calls": [SLOW], "wait_seconds": 0.1}}
    ignored = await rpc(
        mcp, "tools/call", legacy_task_param | {"task": {"ttl": 1}}, tasks=False, name="call_tools_batch"
    )
    assert ignored.result["resultType"] == "complete"


async def test_a_legacy_client_gets_no_task_and_no_tasks_methods(service: ServiceHandle) -> None:
    async with Client(f"{service.base_url}/mcp/", mode="legacy", extensions=[Tasks()]) as legacy:
        result = await legacy.call_tool("call_tools_batch", {"calls": [SLOW], "wait_seconds": 0.1})
        assert result.structured_content is not None and result.structured_content["status"] in {"queued", "running"}
        with pytest.raises(MCPError, match="Method not found"):
            await legacy.session.send_request(GetTask(params=TaskIdParams(task_id="0" * 32)), dict)


async def test_submit_batch_answers_a_task_to_a_client_that_takes_tasks(mcp: httpx.AsyncClient) -> None:
    task_id = task_of((await call_tool(mcp, "submit_batch", {"calls": [ECHO]})).result)
    assert (await get_task(mcp, task_id)).result["taskId"] == task_id
    await finished(mcp, task_id)
    assert (await get_task(mcp, task_id)).result["status"] == "completed"


async def test_the_sdk_client_with_a_tasks_extension_gets_the_final_result(service: ServiceHandle) -> None:
    tasks = Tasks()
    async with Client(f"{service.base_url}/mcp/", extensions=[tasks]) as client:
        result = await client.call_tool("call_tools_batch", {"calls": [SLOW]})
    assert [created.task_id for created in tasks.created] == [result.structured_content["id"]]  # type: ignore[index]
    assert result.structured_content["status"] == "completed"  # type: ignore[index]


async def test_tasks_cancel_cancels_the_batch_as_the_rest_route_does(mcp: httpx.AsyncClient) -> None:
    calls = [{**SLOW, "arguments": {"seconds": 3}}] + [ECHO] * 3
    task_id = task_of((await call_tool(mcp, "call_tools_batch", {"calls": calls, "mode": "serial"})).result)
    ack = await cancel_task(mcp, task_id)
    assert ack.status == 200 and ack.result == {"resultType": "complete", "_meta": ack.result["_meta"]}
    rest = await finished(mcp, task_id)
    assert rest["status"] == "cancelled" and rest["counts"]["cancelled"] == 3
    cancelled = (await get_task(mcp, task_id)).result
    assert cancelled["status"] == "cancelled" and "result" not in cancelled
    assert cancelled["statusMessage"] == "cancelled: 4 of 4 calls finished, 3 cancelled; get_batch has them"
    for other in (task_id, "0" * 32, "not a batch id"):  # again, unknown, not an id: the same empty ack
        assert (await cancel_task(mcp, other)).result["resultType"] == "complete"


async def test_tasks_update_is_acknowledged_and_changes_nothing(mcp: httpx.AsyncClient) -> None:
    task_id = task_of((await call_tool(mcp, "submit_batch", {"calls": [SLOW]})).result)
    params = {"taskId": task_id, "inputResponses": {"k": {"action": "accept", "content": {}}}}
    assert (await rpc(mcp, "tasks/update", params, name=task_id)).result["resultType"] == "complete"
    assert (await rpc(mcp, "tasks/update", params | {"taskId": "0" * 32})).result["resultType"] == "complete"
    assert (await finished(mcp, task_id))["status"] == "completed"


async def test_unknown_ids_answer_invalid_params(mcp: httpx.AsyncClient) -> None:
    answers = [await get_task(mcp, task_id) for task_id in ("0" * 32, "not a batch id", "x" * 65)]
    assert {reply.status for reply in answers} == {400}
    assert [reply.error for reply in answers] == [
        {"code": -32602, "message": "Failed to retrieve task: Task not found"}
    ] * 3


async def test_tasks_methods_and_task_notifications_need_the_capability(mcp: httpx.AsyncClient) -> None:
    task_id = "0" * 32
    for method, params in [
        ("tasks/get", {"taskId": task_id}),
        ("tasks/cancel", {"taskId": task_id}),
        ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
        ("subscriptions/listen", {"notifications": {"taskIds": [task_id]}}),
    ]:
        reply = await rpc(mcp, method, params, tasks=False)
        assert reply.status == 400 and reply.error["code"] == -32021, method
        assert reply.error["data"]["requiredCapabilities"] == {"extensions": {TASKS: {}}}


async def test_mcp_name_is_accepted_but_never_required_and_request_state_is_neither_issued_nor_read(
    mcp: httpx.AsyncClient,
) -> None:
    task_id = task_of((await call_tool(mcp, "submit_batch", {"calls": [SLOW]})).result)
    without = await rpc(mcp, "tasks/get", {"taskId": task_id})
    other = await rpc(mcp, "tasks/get", {"taskId": task_id}, name="another-name")
    right = await get_task(mcp, task_id)
    forged = await rpc(mcp, "tasks/get", {"taskId": task_id, "requestState": "forged"}, name=task_id)  # never read
    assert {reply.result["taskId"] for reply in (without, other, right, forged)} == {task_id}
    assert "requestState" not in right.result


async def test_tasks_result_is_not_a_method(mcp: httpx.AsyncClient) -> None:
    reply = await rpc(mcp, "tasks/result", {"taskId": "0" * 32}, name="0" * 32)
    assert reply.status == 404 and reply.error["code"] == -32601


async def test_ttl_and_poll_interval_are_integers_in_both_namings(mcp: httpx.AsyncClient, settings: Settings) -> None:
    task_id = task_of((await call_tool(mcp, "submit_batch", {"calls": [SLOW], "retention_seconds": 600})).result)
    running = (await get_task(mcp, task_id)).result
    assert running["ttlMs"] >= 600_000 and running["ttlSeconds"] == running["ttlMs"] // 1000
    assert running["pollIntervalMs"] == running["pollIntervalMilliseconds"] == settings.mcp_task_poll_ms
    rest = await finished(mcp, task_id)
    done = (await get_task(mcp, task_id)).result
    assert isinstance(done["ttlMs"], int) and done["lastUpdatedAt"] == rest["finished_at"]
    assert 600_000 <= done["ttlMs"] <= 600_000 + round(rest["elapsed_seconds"] * 1000) + 1
