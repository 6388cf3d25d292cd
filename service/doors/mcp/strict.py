"""The MCP door's tools refuse what they do not take and never echo a value: argument errors name each field and
problem (a secret in a call's `arguments` must not reach the agent's transcript), and core errors become tool errors
the agent can act on (the REST door maps the same ones to 422/403/404/409/429/503)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import ValidationError
from redis.exceptions import RedisError

from mcp_batch.errors import Backpressure, BatchNotFound, Conflict, Forbidden, InvalidBatch, ItemNotFound
from service.doors.mcp.schemas import lean

logger = logging.getLogger(__name__)


class StrictTool(Tool):
    """A tool whose unknown arguments are refused by name, and whose argument errors never quote the value given.

    The SDK's argument model ignores keys it does not know, so `response_max_bytes: 5` on a tool that did not take
    it would be dropped silently; here every such key is named and nothing is run.
    """

    @classmethod
    def build(cls, fn: Callable[..., Any], description: str, annotations: ToolAnnotations) -> StrictTool:
        tool = cls.from_function(fn, description=description, annotations=annotations)
        assert isinstance(tool, StrictTool)  # from_function builds `cls`
        tool.parameters = lean(tool.parameters) | {"additionalProperties": False}  # the schema says so too
        if tool.fn_metadata.output_schema is not None:  # read when listed: the SDK's FuncMetadata reads it live
            tool.fn_metadata.output_schema = lean(tool.fn_metadata.output_schema)
        return tool

    async def run(self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False) -> Any:
        unknown = sorted(set(arguments) - set(self.parameters.get("properties", {})))
        if unknown:
            named: list[tuple[tuple[str | int, ...], str]] = [
                ((name,), "not an argument of this tool") for name in unknown
            ]
            raise ToolError(problems_text(f"Error executing tool {self.name}: unknown arguments", named))
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except ToolError as exc:
            # The SDK reports arguments that fail the input schema as a ToolError caused by pydantic's error, whose
            # text quotes each input (its Tool.run says so; tests/service/doors/mcp/test_strict.py fails if that
            # changes); a crash (UnexpectedToolError) already carries no detail.
            if type(exc) is not ToolError or not isinstance(exc.__cause__, ValidationError):
                raise
            problems = [(tuple(e["loc"]), e["msg"]) for e in exc.__cause__.errors()]
            raise ToolError(problems_text(f"Error executing tool {self.name}: invalid arguments", problems)) from None


def problems_text(title: str, problems: Sequence[tuple[tuple[str | int, ...], str]]) -> str:
    lines = [f"- {'.'.join(map(str, loc)) or '(arguments)'}: {msg}" for loc, msg in problems]
    return "\n".join([f"{title}; nothing was run:", *lines])


@contextmanager
def tool_errors() -> Iterator[None]:
    """Core errors as tool errors."""
    try:
        yield
    except InvalidBatch as exc:
        raise ToolError(problems_text("invalid batch", [(p.loc, p.msg) for p in exc.problems])) from None
    except Forbidden as exc:
        raise ToolError(problems_text("not allowed for this key", [(p.loc, p.msg) for p in exc.problems])) from None
    except (Backpressure, Conflict) as exc:
        raise ToolError(str(exc)) from None
    except ItemNotFound:
        raise ToolError("no item with that id in the batch") from None
    except BatchNotFound:
        raise ToolError("no batch with that id (it never existed, or it has expired)") from None
    except RedisError as exc:
        logger.error("Redis error: %s", type(exc).__name__)
        raise ToolError("storage unavailable, try again shortly") from None
