"""Batches as MCP tasks: the tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, its 2026-07-28 revision).

The task is the batch: its task id is the batch id, and nothing about it lives in one API process, so any replica
answers `tasks/get` for it, after a restart too, and REST shows the same batch. A `tools/call` becomes a task only
when this request's `_meta` client capabilities declare the extension on the 2026-07-28 wire (a client that did
not, or that declared it on an earlier request only, never gets one):

- `call_tools_batch` waits `mcp_task_wait_seconds` for its batch; a batch finished by then is answered inline as
  today, a longer one with a `CreateTaskResult` (`resultType: "task"`);
- `submit_batch` always answers with a task;
- a proxied backend tool (`server__tool`) runs as a batch of one: inline when it finishes within that short wait,
  else a task; a client without the capability waits up to `sync_wait_seconds` for it.

The batch is stored before its task is answered, so a `tasks/get` for it resolves at once. `tasks/get` reads the
batch (after `Services.owned`: another tenant's id answers exactly as an unknown one, -32602), `tasks/cancel` cancels
it as `POST /v1/batches/{id}/cancel` does and acknowledges any id. A batch whose item waits for an answer is
`input_required`, its questions in `inputRequests` (keyed by question id); `tasks/update` `inputResponses` answers
them as `POST /v1/batches/{id}/items/{item_id}/input` does. A client that takes tasks can answer, so its batches
ask by default (`questions.policy: ask`). No `requestState` is issued, and one sent is never acted on. Status
notifications come on `subscriptions/listen` with `taskIds`, served at the door (listen.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, CallToolRequestParams, CallToolResult, RequestParams, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from redis.exceptions import RedisError

from mcp_batch.errors import BatchAlreadyFinished, BatchNotFound, Forbidden, InvalidBatch
from mcp_batch.models import TERMINAL_BATCH, BatchStatus
from mcp_batch.settings import Settings
from service.application import direct_calls, questions, reading
from service.application.services import Services, owned
from service.auth import current_caller
from service.doors.mcp.proxy import ProxyTools
from service.doors.mcp.render import direct_result, document_result
from service.doors.mcp.strict import tool_errors
from service.doors.mcp.task_view import asking_view, task_view

logger = logging.getLogger(__name__)

TASKS = "io.modelcontextprotocol/tasks"
_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)
_NOT_FOUND = "Failed to retrieve task: Task not found"
_STORAGE = "storage unavailable, try again shortly"

# How long a batch tool may wait for its batch while the door decides between a result and a task (None: no cap).
# A context variable because an interceptor cannot change the arguments the tool runs with.
wait_cap: ContextVar[float | None] = ContextVar("mcp_task_wait_cap", default=None)


class TaskParams(RequestParams):
    """Params of tasks/get and tasks/cancel."""

    task_id: str
    request_state: str | None = None  # parsed, never acted on: this server issues none


class UpdateParams(TaskParams):
    """Params of tasks/update: the answers to the task's `inputRequests`, by their keys."""

    input_responses: dict[str, Any] | None = None


def opted_in(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request (not an earlier one) declared the extension, on a wire version that has it."""
    caps = ctx.session.client_capabilities
    return ctx.protocol_version in _MODERN and bool(caps and caps.extensions and TASKS in caps.extensions)


class BatchTasks(Extension):
    """The tasks extension over mcp-batch's batches; also the door of proxied tools (`proxy`, when turned on)."""

    identifier = TASKS

    def __init__(self, services: Callable[[], Services], settings: Settings, proxy: ProxyTools | None) -> None:
        self._services = services
        self._settings = settings
        self._proxy = proxy

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskParams, self.get, protocol_versions=_MODERN),
            MethodBinding("tasks/cancel", TaskParams, self.cancel, protocol_versions=_MODERN),
            MethodBinding("tasks/update", UpdateParams, self.update, protocol_versions=_MODERN),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        target = self._proxy.target(params.name, current_caller.get()) if self._proxy is not None else None
        questions.answerable.set(opted_in(ctx))  # a client that takes tasks can answer its batch's questions
        if target is not None:
            return await self._direct(target[0], target[1], params.arguments or {}, opted_in(ctx))
        if params.name not in ("call_tools_batch", "submit_batch") or not opted_in(ctx):
            return await call_next(ctx)
        token = wait_cap.set(self._settings.mcp_task_wait_seconds)
        try:
            result = await call_next(ctx)
        finally:
            wait_cap.reset(token)
        if not isinstance(result, CallToolResult) or not isinstance(result.structured_content, dict):
            return result  # a tool error: nothing was stored
        document = result.structured_content
        if params.name == "call_tools_batch" and document.get("status") in TERMINAL_BATCH:
            return result
        return await self._created(str(document["id"]))

    async def _direct(self, server: str, tool: str, arguments: dict[str, Any], tasks: bool) -> HandlerResult:
        """A proxied tool's call: inline when it ends within the short wait, else a task (or, without the
        capability, a longer wait)."""
        settings = self._settings
        wait = settings.mcp_task_wait_seconds if tasks else settings.sync_wait_seconds
        try:
            with tool_errors():
                one = await direct_calls.call_one(self._services(), current_caller.get(), server, tool, arguments, wait)
        except ToolError as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        if one.item is not None:
            return direct_result(one.batch_id, one.item)
        if tasks:
            return await self._created(one.batch_id)
        text = (
            f"the call is still running after {wait:g} s; it is batch {one.batch_id!r}: read its result with "
            f"get_item (item_id {direct_calls.ONE_CALL_ID!r}, wait with get_batch's wait_seconds)"
        )
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    async def _created(self, batch_id: str) -> dict[str, Any]:
        """The CreateTaskResult of a stored batch (read back: a tasks/get for it resolves)."""
        try:
            document = await reading.document(self._services(), batch_id, limit=0)
        except RedisError as exc:
            raise _storage_error(exc) from None
        return {"resultType": "task", **task_view(document, self._settings.mcp_task_poll_ms)}

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        """The task's status, with the batch's result once it has ended."""
        require_client_extension(ctx, TASKS)
        services = self._services()
        try:
            batch_id = await owned(services, params.task_id, current_caller.get())
            document = await reading.document(services, batch_id, limit=1)
            running = await reading.progress(services, batch_id) if document.counts.running else []
            view = task_view(document, self._settings.mcp_task_poll_ms, running)
            if document.counts.input_required:
                view |= asking_view(await questions.waiting(services, batch_id))
            if document.status in (BatchStatus.completed, BatchStatus.expired):
                view["result"] = (
                    await self._result(services, batch_id, direct_calls.is_one_call(document))
                ).model_dump(mode="json", by_alias=True, exclude_none=True)
        except BatchNotFound:
            raise MCPError(code=INVALID_PARAMS, message=_NOT_FOUND) from None
        except RedisError as exc:
            raise _storage_error(exc) from None
        return {"resultType": "complete", **view}

    async def _result(self, services: Services, batch_id: str, one_call: bool) -> CallToolResult:
        """What the tool that made the batch answers for it once it has ended."""
        if one_call:
            one = await direct_calls.read_one(services, batch_id)
            assert one.item is not None  # the batch has ended
            return direct_result(batch_id, one.item)
        return document_result(await reading.document(services, batch_id))

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        """Cancel the caller's batch; acknowledged for any id (unknown, another tenant's, already ended)."""
        require_client_extension(ctx, TASKS)
        services, caller = self._services(), current_caller.get()
        try:
            await reading.cancel(services, caller, await owned(services, params.task_id, caller))
        except (BatchNotFound, BatchAlreadyFinished):
            pass
        except Forbidden as exc:
            raise MCPError(code=INVALID_PARAMS, message="; ".join(p.msg for p in exc.problems)) from None
        except RedisError as exc:
            raise _storage_error(exc) from None
        return {"resultType": "complete"}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> HandlerResult:
        """Answer the task's input requests (as POST .../items/{item_id}/input does); acknowledged for any id, and
        a key naming no waiting request is passed over. -32602 names a response that does not fit its request."""
        require_client_extension(ctx, TASKS)
        services = self._services()
        try:
            await questions.answer_responses(
                services, current_caller.get(), params.task_id, params.input_responses or {}
            )
        except BatchNotFound:
            pass
        except (InvalidBatch, Forbidden) as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        except RedisError as exc:
            raise _storage_error(exc) from None
        return {"resultType": "complete"}


def _storage_error(exc: RedisError) -> MCPError:
    logger.error("Redis error in a task request: %s", type(exc).__name__)
    return MCPError(code=INTERNAL_ERROR, message=_STORAGE)
