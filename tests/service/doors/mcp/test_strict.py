"""What doors/mcp/strict.py relies on in the MCP SDK's `Tool`: the argument names in its `parameters` schema, and an
argument error raised as a plain ToolError caused by pydantic's ValidationError (whose text quotes the input)."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import Field, ValidationError

from service.doors.mcp.strict import StrictTool


async def count(items: list[str], at_most: Annotated[int, Field(ge=1)] = 10) -> int:
    return min(len(items), at_most)


async def test_a_tools_schema_names_its_arguments_and_an_argument_error_is_caused_by_pydantics() -> None:
    tool = StrictTool.from_function(count)
    assert set(tool.parameters["properties"]) == {"items", "at_most"}
    context: Any = None  # the tool takes no context
    with pytest.raises(ToolError) as raised:
        await Tool.run(tool, {"items": "not a list, a secret"}, context)  # the SDK's own run, under it
    assert type(raised.value) is ToolError and isinstance(raised.value.__cause__, ValidationError)


async def test_a_strict_tool_names_each_bad_or_unknown_argument_and_never_its_value() -> None:
    tool = StrictTool.build(count, "Counts.", annotations=None)  # type: ignore[arg-type]
    context: Any = None
    with pytest.raises(ToolError, match="unknown arguments") as unknown:
        await tool.run({"items": [], "limit": 3}, context)
    assert "- limit: not an argument of this tool" in str(unknown.value)
    with pytest.raises(ToolError, match="invalid arguments") as invalid:
        await tool.run({"items": "a secret value", "at_most": 0}, context)
    assert "a secret value" not in str(invalid.value) and "- at_most:" in str(invalid.value)
    assert await tool.run({"items": ["a", "b"], "at_most": 1}, context) == 1
