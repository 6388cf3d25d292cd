"""Interop with a client nobody here wrote: FastMCP 4's `Client` (fastmcp 4.1.4) against the MCP door, and a batch
whose item asks a question of server-everything's elicitation tool.

`fastmcp-tasks` 4.1.4, which gives that client SEP-2663 tasks (and answers `input_required` tasks through its
elicitation handler), cannot be installed beside this project: it needs pydocket>=0.26.1, which needs redis>=6,
and arq 0.28 needs redis<6. So FastMCP's own client is driven without tasks (its batches decline questions, as
for any client that cannot answer), and the task's flow working -> input_required -> answered -> completed is
driven in the same test as raw JSON-RPC.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastmcp import Client as FastMCPClient

# the question-asking backend and the quick task polling of the tasks door's own question tests
from tests.service.doors.mcp.test_task_questions import ELICIT, servers, settings  # noqa: F401
from tests.service.doors.mcp.wire import call_tool, get_task, rpc
from tests.support import ServiceHandle, eventually, finished

pytestmark = pytest.mark.timeout(120)


def text_of(item: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in item["content"])


async def test_fastmcps_client_runs_a_batch_that_declines_and_the_raw_task_flow_answers_the_question(
    service: ServiceHandle,
) -> None:
    async with FastMCPClient(f"{service.base_url}/mcp/") as fast:
        names = {tool.name for tool in await fast.list_tools()}
        assert {"call_tools_batch", "submit_batch", "get_batch"} <= names
        answered = await fast.call_tool("call_tools_batch", {"calls": [ELICIT], "read_only": False})
        (item,) = answered.structured_content["results"]
        assert item["status"] == "ok" and "decline" in text_of(item)

    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as http:
        created = (await call_tool(http, "submit_batch", {"calls": [ELICIT], "read_only": False})).result
        assert created["status"] == "working"
        task_id = created["taskId"]

        async def asking() -> dict[str, Any] | None:
            task = (await get_task(http, task_id)).result
            return task if task["status"] == "input_required" else None

        task = await eventually(asking, what="the task input_required", timeout=60)
        (key,) = task["inputRequests"]
        answer = {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"name": "Linus"}}}}
        assert (await rpc(http, "tasks/update", answer, name=task_id)).result["resultType"] == "complete"
        await finished(http, task_id)
        done = (await get_task(http, task_id)).result
    assert done["status"] == "completed"
    (item,) = done["result"]["structuredContent"]["results"]
    assert item["status"] == "ok" and "Linus" in text_of(item)
