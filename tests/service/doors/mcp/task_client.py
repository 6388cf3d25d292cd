"""A tasks extension for the SDK `Client` (SDK 2.3 has no tasks runtime): it declares the capability on every
request and resolves a `resultType: "task"` answer by polling tasks/get, so `call_tool` returns the final result."""

from __future__ import annotations

from typing import Any, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"


class TaskFields(Result):
    model_config = ConfigDict(extra="allow")

    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    status_message: str | None = None


class CreatedTask(TaskFields):
    result_type: Literal["task"] = "task"


class DetailedTask(TaskFields):
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskIdParams(RequestParams):
    task_id: str


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # the session copies params.taskId into the Mcp-Name header


class TaskFailed(Exception):
    """The task ended without a result (cancelled or failed)."""


class Tasks(ClientExtension):
    """Declares the tasks extension and claims `resultType: "task"` on tools/call; `created` lists every task that a
    call of this client was answered with."""

    identifier = TASKS

    def __init__(self) -> None:
        self.created: list[CreatedTask] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        """Poll at the server's pollIntervalMs (the protocol's pacing, not a test's guess) until the task ends."""
        self.created.append(created)
        with anyio.fail_after(60):
            while True:
                await anyio.sleep((created.poll_interval_ms or 1000) / 1000)
                request = GetTask(params=TaskIdParams(task_id=created.task_id))
                got = await ctx.session.send_request(request, DetailedTask)
                if got.status == "completed":
                    return CallToolResult.model_validate(got.result)
                if got.status in ("failed", "cancelled"):
                    raise TaskFailed(got.status)
