"""The MCP door's seven tools over the application layer, the same use cases the REST routes call.

`call_tools_batch` and `submit_batch` submit through `submitting.submit`, so a batch is validated, stored, queued and
run by the workers exactly as one POSTed to `/v1/batches` is; `get_batch`, `get_item`, `list_batches` (the task
inbox: a client that lost its task ids finds its batches again, as `GET /v1/batches` lists them) and `list_servers`
read through `reading` and `backends_info`; `delete_batch` deletes through `deleting`. Each tool's arguments are one
model (arguments.py); what it answers is compact JSON (render.py); core errors are tool errors naming each problem,
never a value (strict.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

from mcp_batch.settings import Settings
from mcp_batch.store.idempotency import check_key
from service.application import deleting, reading, submitting
from service.application.backends_info import describe_servers
from service.application.services import Services, owned
from service.auth import current_caller
from service.doors.mcp.arguments import (
    BatchArguments,
    CallArguments,
    DeleteBatchArguments,
    GetBatchArguments,
    GetItemArguments,
    ListBatchesArguments,
    NoArguments,
    configured,
    tool_function,
)
from service.doors.mcp.render import batches_result, compact, document_result, item_result, listing_result
from service.doors.mcp.strict import StrictTool, tool_errors
from service.doors.mcp.tasks import wait_cap
from service.doors.mcp.views import BatchView, ItemView, ListingView, ServersView

# Running tools on arbitrary backends: it may write (read_only=false) and the backends are outside this service. A
# caller who may not write sees them read-only (hints.py).
_RUNS_TOOLS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
# Reads of this service's own state (list_servers may refresh a backend's tools/list, which changes nothing).
_READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
# Deleting an ended batch: it removes this service's own data, the same again finds nothing to delete.
_DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

_BATCH_HELP = """ Calls run concurrently (up to max_concurrency) or `serial`; a failure stops the rest only with \
on_error=stop. An argument exactly "@<id>.<path>" is that field of call <id>'s result (keys or list indexes: \
"@user.emails.0"); the call waits for it. read_only (default) runs only read-only tools; others end `blocked`. \
Nested calls act with this tool's authority: client rules keyed on their names do not apply. \
Answer: `status`, `ok`, nonzero `counts`, `failed_ids`, `results` in call order, each with `status` (ok, error, \
timeout, blocked, skipped, ...), `content`, `structured_content`, `error`; isError if a call failed. Whole \
`truncated` items: get_item; more results: get_batch `next_offset`. A malformed batch is refused whole, naming \
each problem."""

_DOCUMENT = Annotated[CallToolResult, BatchView]


class Deleted(BaseModel):
    id: str
    deleted: bool = True


class BatchTools:
    """The tools, reading the services per call (`services()`: the app's lifespan builds them)."""

    def __init__(self, services: Callable[[], Services], settings: Settings) -> None:
        self._services = services
        self._settings = settings

    def tools(self) -> list[StrictTool]:
        settings = self._settings
        sync_wait, max_wait = settings.sync_wait_seconds, settings.max_wait_seconds
        kept = settings.retention_seconds // 3600

        def tool(name: str, model: type[Any], run: Callable[[Any], Any], returns: Any, about: str) -> StrictTool:
            annotations = _RUNS_TOOLS if issubclass(model, BatchArguments) else _READS
            annotations = _DELETES if model is DeleteBatchArguments else annotations
            return StrictTool.build(tool_function(name, model, run, returns), about, annotations)

        call = configured(CallArguments, f"At most {sync_wait:g}.", sync_wait)
        get = configured(GetBatchArguments, f"At most {max_wait:g}.", 0)

        return [
            tool(
                "call_tools_batch",
                call,
                self.call_tools_batch,
                _DOCUMENT,
                "Run many MCP tool calls on the configured backends at once; answers when the batch ends, or "
                "after `wait_seconds` with its `id` for get_batch." + _BATCH_HELP,
            ),
            tool(
                "submit_batch",
                BatchArguments,
                self.submit_batch,
                _DOCUMENT,
                "Queue a batch (arguments and answer as call_tools_batch) and answer at once, `queued`; get_batch "
                "reads it later. For batches longer than a turn.",
            ),
            tool(
                "get_batch",
                get,
                self.get_batch,
                _DOCUMENT,
                "A batch submitted earlier (here or over REST), as call_tools_batch answers it. `wait_seconds` holds "
                f"the call until it ends (at most {max_wait:g}); `offset`/`limit` page `results`. Kept {kept} h after "
                "it ends.",
            ),
            tool(
                "get_item",
                GetItemArguments,
                self.get_item,
                Annotated[CallToolResult, ItemView],
                "One call's result whole, with its timings (a `truncated` one too); content larger than one answer "
                "comes a page at a time: pass `next_cursor` as `cursor`.",
            ),
            tool(
                "list_batches",
                ListBatchesArguments,
                self.list_batches,
                Annotated[CallToolResult, ListingView],
                "The caller's batches, newest first (to find a lost id), optionally only some `status`es; "
                f"`next_cursor` pages on. Ended ones are kept {kept} h.",
            ),
            tool(
                "list_servers",
                NoArguments,
                self.list_servers,
                Annotated[CallToolResult, ServersView],
                "The backends a batch can call: transport, timeout, limits and their use now, and their tools "
                "(input schemas, annotations: readOnlyHint runs under read_only). An unreachable one has "
                "`tools_error`; one needing your own credential, `connect`.",
            ),
            tool(
                "delete_batch",
                DeleteBatchArguments,
                self.delete_batch,
                Annotated[CallToolResult, Deleted],
                "Delete an ended batch and all it stored; an undelivered webhook is dropped. A queued or running "
                "batch is refused: cancel it first.",
            ),
        ]

    async def _submitted(self, arguments: BatchArguments) -> str:
        """Submit (once per idempotency key), as POST /v1/batches does; the batch id."""
        try:
            check_key(arguments.idempotency_key)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        caller, key = current_caller.get(), arguments.idempotency_key
        return (await submitting.submit(self._services(), arguments.request(), caller, key)).batch_id

    async def submit_batch(self, arguments: BatchArguments) -> CallToolResult:
        with tool_errors():
            batch_id = await self._submitted(arguments)
            return document_result(await reading.document(self._services(), batch_id), arguments.verbose)

    async def call_tools_batch(self, arguments: CallArguments) -> CallToolResult:
        cap = wait_cap.get()  # set when the client takes a task instead of a long wait
        wait = min(arguments.wait_seconds, self._settings.sync_wait_seconds, math.inf if cap is None else cap)
        with tool_errors():
            batch_id = await self._submitted(arguments)
            return document_result(await reading.read(self._services(), batch_id, wait), arguments.verbose)

    async def get_batch(self, arguments: GetBatchArguments) -> CallToolResult:
        with tool_errors():
            services, batch_id = self._services(), arguments.batch_id
            await owned(services, batch_id, current_caller.get())
            page = await reading.read(services, batch_id, arguments.wait_seconds, arguments.offset, arguments.limit)
            return document_result(page, arguments.verbose)

    async def get_item(self, arguments: GetItemArguments) -> CallToolResult:
        with tool_errors():
            services = self._services()
            await owned(services, arguments.batch_id, current_caller.get())
            return item_result(await reading.item(services, arguments.batch_id, arguments.item_id, arguments.cursor))

    async def list_batches(self, arguments: ListBatchesArguments) -> CallToolResult:
        with tool_errors():
            statuses = set(arguments.status) if arguments.status else None
            listing = await reading.batches(
                self._services(), current_caller.get(), statuses, arguments.limit, arguments.cursor
            )
            return batches_result(listing)

    async def delete_batch(self, arguments: DeleteBatchArguments) -> CallToolResult:
        with tool_errors():
            services, batch_id, caller = self._services(), arguments.batch_id, current_caller.get()
            await owned(services, batch_id, caller)
            await deleting.delete(services, caller, batch_id)
            content = Deleted(id=batch_id).model_dump(mode="json")
            return CallToolResult(content=[TextContent(type="text", text=compact(content))], structured_content=content)

    async def list_servers(self, arguments: NoArguments) -> CallToolResult:
        with tool_errors():
            return listing_result(await describe_servers(self._services(), current_caller.get()))
