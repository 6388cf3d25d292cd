"""A running item's progress on the event stream and over MCP tasks: `item_progress` events while it runs, each
report once, before the item's own event; and the task's `statusMessage` saying it. Against server-everything's
`trigger-long-running-operation` over stdio."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.service.doors.mcp.wire import call_tool, get_task
from tests.service.routes.test_stream import stream
from tests.support import eventually, finished, submit
from tests.third_party import everything_stdio

pytestmark = pytest.mark.timeout(90)

LONG = {"id": "long", "server": "everything", "tool": "trigger-long-running-operation"}


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


async def test_the_event_stream_sends_each_progress_report_of_a_running_item_once(client: httpx.AsyncClient) -> None:
    batch = await submit(client, [{**LONG, "arguments": {"duration": 3, "steps": 3}}])
    events = await stream(client, batch["id"])
    names = [event.event for event in events]
    reports = [event.data for event in events if event.event == "item_progress"]
    assert reports, names
    assert all(r["id"] == "long" and r["index"] == 0 and r["total"] == 3 for r in reports)
    assert [r["progress"] for r in reports] == sorted({r["progress"] for r in reports})  # each report once, in order
    assert names.index("item_progress") < names.index("item") < names.index("end")
    assert "progress" not in (await finished(client, batch["id"]))["results"][0]


async def test_a_tasks_status_message_says_its_running_items_progress(client: httpx.AsyncClient) -> None:
    arguments = {"calls": [{**LONG, "arguments": {"duration": 4, "steps": 4}}]}
    task_id = (await call_tool(client, "submit_batch", arguments)).result["taskId"]

    async def said() -> str | None:
        message: str = (await get_task(client, task_id)).result["statusMessage"]
        return message if "'long': " in message else None

    message = await eventually(said, what="the task's progress message", timeout=30)
    assert message.startswith("0 of 1 calls finished; 'long': ") and " of 4 (" in message
    await finished(client, task_id)
    done = (await get_task(client, task_id)).result
    assert done["status"] == "completed" and done["statusMessage"] == "1 of 1 calls finished"
