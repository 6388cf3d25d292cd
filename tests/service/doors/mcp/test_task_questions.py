"""A backend's question as the task's input request over MCP tasks (SEP-2663), raw JSON-RPC over httpx: the task
goes `working` -> `input_required` (its `inputRequests`) -> answered by `tasks/update` -> `completed`, against
server-everything's elicitation tool over stdio. A client that takes tasks gets batches that ask by default."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.service.doors.mcp.wire import call_tool, get_task, rpc
from tests.support import ServiceHandle, eventually, finished
from tests.third_party import everything_stdio

pytestmark = pytest.mark.timeout(120)

ELICIT = {"id": "ask", "server": "everything", "tool": "trigger-elicitation-request"}


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"mcp_task_wait_seconds": 0.5, "mcp_task_poll_ms": 100})


@pytest.fixture
async def mcp(service: ServiceHandle) -> Any:
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        yield http


async def input_required(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async def asking() -> dict[str, Any] | None:
        task = (await get_task(http, task_id)).result
        return task if task["status"] == "input_required" else None

    return await eventually(asking, what=f"task {task_id} input_required", timeout=60)


async def test_a_task_asks_through_input_requests_and_tasks_update_answers_it(mcp: httpx.AsyncClient) -> None:
    created = (await call_tool(mcp, "call_tools_batch", {"calls": [ELICIT], "read_only": False})).result
    assert created["resultType"] == "task" and created["status"] == "working"
    task_id = created["taskId"]
    task = await input_required(mcp, task_id)
    assert task["statusMessage"] == "0 of 1 calls finished, 1 waiting for an answer"
    ((key, request),) = task["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    assert "name" in request["params"]["requestedSchema"]["required"]

    bad = {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"integer": "x"}}}}
    refused = (await rpc(mcp, "tasks/update", bad, name=task_id)).error
    assert refused["code"] == -32602 and "content.integer" in refused["message"] and "'x'" not in refused["message"]
    good = {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"name": "Grace Hopper"}}}}
    assert (await rpc(mcp, "tasks/update", good, name=task_id)).result["resultType"] == "complete"

    await finished(mcp, task_id)
    done = (await get_task(mcp, task_id)).result
    assert done["status"] == "completed" and "inputRequests" not in done
    item = done["result"]["structuredContent"]["results"][0]
    assert item["status"] == "ok" and "Grace Hopper" in "".join(block.get("text", "") for block in item["content"])


async def test_a_client_without_tasks_gets_a_batch_that_declines(mcp: httpx.AsyncClient) -> None:
    answered = (await call_tool(mcp, "call_tools_batch", {"calls": [ELICIT], "read_only": False}, tasks=False)).result
    item = answered["structuredContent"]["results"][0]
    assert item["status"] == "ok" and "decline" in "".join(block.get("text", "") for block in item["content"])
