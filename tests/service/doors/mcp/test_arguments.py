"""The MCP door's tool arguments: one model per tool, the two batch tools sharing one, and the schema the SDK reads
from a tool function's signature being that model's."""

from __future__ import annotations

from typing import Any

from mcp_batch.models import BatchRequest
from mcp_batch.settings import Settings
from service.doors.mcp.arguments import BatchArguments, tool_function
from service.doors.mcp.strict import StrictTool
from service.doors.mcp.tools import BatchTools


def schemas() -> dict[str, dict[str, Any]]:
    tools = BatchTools(lambda: None, Settings(auth="none", sync_wait_seconds=12)).tools()  # type: ignore[arg-type,return-value]
    return {tool.name: tool.parameters for tool in tools}


def test_the_two_batch_tools_take_the_same_batch_arguments_and_every_option_rest_takes() -> None:
    found = schemas()
    submit, call = found["submit_batch"]["properties"], found["call_tools_batch"]["properties"]
    assert {name: call[name] for name in submit} == submit and set(call) - set(submit) == {"wait_seconds"}
    assert set(BatchRequest.model_fields) <= set(submit) and "idempotency_key" in submit
    assert call["wait_seconds"]["default"] == 12 and "At most 12" in call["wait_seconds"]["description"]
    assert found["submit_batch"]["required"] == ["calls"] and "required" not in found["list_servers"]


async def test_a_tool_function_hands_its_body_the_arguments_as_one_model() -> None:
    seen: list[BatchArguments] = []

    async def run(arguments: BatchArguments) -> int:
        seen.append(arguments)
        return len(arguments.calls)

    tool = StrictTool.build(tool_function("count", BatchArguments, run, int), "Counts.", None)  # type: ignore[arg-type]
    context: Any = None
    calls = [{"server": "s", "tool": "t"}, {"server": "s", "tool": "u", "arguments": {"a": 1}}]
    assert await tool.run({"calls": calls, "mode": "serial", "priority": "low"}, context) == 2
    request = seen[0].request()
    assert (
        request.mode == "serial"
        and request.priority == "low"
        and request.calls[1].arguments == {"a": 1}
        and request.read_only is True
    )
