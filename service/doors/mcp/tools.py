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
from pydantic import BaseModel, Field

from mcp_batch.backend_info import ServerInfo
from mcp_batch.models import BatchDocument, BatchList, ItemPage
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

# Running tools on arbitrary backends: it may write (read_only=false) and the backends are outside this service.
_RUNS_TOOLS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
# Reads of this service's own state (list_servers may refresh a backend's tools/list, which changes nothing).
_READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

_BATCH_HELP = """

Each call names a backend (`server`, from list_servers), a `tool` and its `arguments`, with an optional `id` unique \
in the batch (default: its index). The calls run on the service's workers under each backend's rate and concurrency \
limits: `mode="concurrent"` runs up to `max_concurrency` at once, `"serial"` one after another in order. One call's \
failure does not stop the rest unless `on_error="stop"` (then nothing new starts and the rest are `skipped`).

References: an argument that is exactly `"@<id>.<field>"` takes that field of an earlier call's result (its \
structured content, or its one text block parsed as JSON), keeping its JSON type; the call waits for that one. Path \
parts are object keys or list indexes. Example: `[{"id": "user", "server": "crm", "tool": "find_user", \
"arguments": {"name": "Ada"}}, {"server": "mail", "tool": "send", "arguments": {"to": "@user.email"}}]`; \
`"@user.emails.0"` is the first of a list. A string whose `@<id>` is no earlier call's id is plain text.

With `read_only=true` (the default) only read-only tools run (annotated readOnlyHint, or listed read-only in the \
servers file); any other call ends `blocked` and never reaches its backend. `read_only=false` lets write and \
destructive tools run. This tool carries the authority of every tool it can call: a client rule keyed on a nested \
tool's name does not fire for a call made through it.

The document: `status` (queued, running, cancelling, then completed, cancelled or expired), `ok` (true only when \
ended and every call is ok), `counts`, `failed_ids`, and `results` in call order, each with its `status` (ok, error, \
timeout, blocked, unknown_server, unknown_tool, skipped, ...), `content`, `structured_content` and `error` (`code`, \
`message`); fields that are null are left out. The answer is `isError` once the batch has ended with any call \
failed. `results` holds what `response_max_bytes` allows: `next_offset` pages on (get_batch), a shrunk item says \
`truncated` (get_item reads it whole). Unknown arguments, and a malformed batch (no calls, duplicate ids, too many \
calls), are refused whole, naming each problem; nothing is run."""

# Deleting an ended batch: it removes this service's own data, the same again finds nothing to delete.
_DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

_DOCUMENT = Annotated[CallToolResult, BatchDocument]


class Deleted(BaseModel):
    """delete_batch's answer."""

    id: str = Field(description="The batch deleted.")
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

        call = configured(
            CallArguments,
            f"Seconds to wait for the batch to finish (at most {sync_wait:g}); then the document.",
            sync_wait,
        )
        get = configured(GetBatchArguments, f"Wait up to this long for the batch to finish (at most {max_wait:g}).", 0)

        return [
            tool(
                "call_tools_batch",
                call,
                self.call_tools_batch,
                _DOCUMENT,
                "Run a batch of MCP tool calls on the configured backends and return one document with every call's "
                f"result. Waits up to `wait_seconds` (at most {sync_wait:g}) for the batch to finish; a document "
                "still `queued` or `running` carries the `id` to pass to get_batch for the rest." + _BATCH_HELP,
            ),
            tool(
                "submit_batch",
                BatchArguments,
                self.submit_batch,
                _DOCUMENT,
                "Queue a batch of MCP tool calls and return its document at once (status `queued`); read it later "
                "with get_batch. For batches that take longer than one turn should wait." + _BATCH_HELP,
            ),
            tool(
                "get_batch",
                get,
                self.get_batch,
                _DOCUMENT,
                "The document of a batch submitted earlier (by call_tools_batch, submit_batch or the REST API). "
                f"`wait_seconds` > 0 holds the call until the batch completes or that time passes (at most "
                f"{max_wait:g}); `offset`/`limit` return one page of `results`. Results are kept for {kept} h after "
                "a batch finishes.",
            ),
            tool(
                "get_item",
                GetItemArguments,
                self.get_item,
                Annotated[CallToolResult, ItemPage],
                "One item of a batch, whole (as GET /v1/batches/{id}/items/{item_id}): for an item the document "
                "shrank to fit its budget (`truncated`). When its content is larger than one answer, a page of it "
                "and `next_cursor`: call again with `cursor` for the next page (structured content comes on the "
                "first).",
            ),
            tool(
                "list_batches",
                ListBatchesArguments,
                self.list_batches,
                Annotated[CallToolResult, BatchList],
                "The caller's batches, newest first (as GET /v1/batches): each one's `id` (also its task id), "
                "`status`, item counts and times, a page at a time (`next_cursor`: pass it as `cursor` for older "
                f"ones), optionally only those in some `status`es. Finished batches are listed for {kept} h; for "
                "finding a batch whose id was lost.",
            ),
            tool(
                "list_servers",
                NoArguments,
                self.list_servers,
                Annotated[CallToolResult, list[ServerInfo]],
                "The backends a batch can call: each one's name, transport, timeout, limits and their current use, "
                "and its tools with input schemas and annotations (readOnlyHint: runs in a read_only batch). A "
                "backend that cannot be reached is listed with `tools: null` and `tools_error`.",
            ),
            tool(
                "delete_batch",
                DeleteBatchArguments,
                self.delete_batch,
                Annotated[CallToolResult, Deleted],
                "Delete an ended batch (completed, cancelled or expired) whole, as DELETE /v1/batches/{id}: its calls "
                "and results, its place in the listing, its idempotency key and its stored bytes; a completion "
                "webhook not yet delivered is dropped. A batch still queued or running is refused (naming its "
                "status): cancel it first. Afterwards get_batch finds no such batch.",
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
            return document_result(await reading.document(self._services(), batch_id))

    async def call_tools_batch(self, arguments: CallArguments) -> CallToolResult:
        cap = wait_cap.get()  # set when the client takes a task instead of a long wait
        wait = min(arguments.wait_seconds, self._settings.sync_wait_seconds, math.inf if cap is None else cap)
        with tool_errors():
            batch_id = await self._submitted(arguments)
            return document_result(await reading.read(self._services(), batch_id, wait))

    async def get_batch(self, arguments: GetBatchArguments) -> CallToolResult:
        with tool_errors():
            services, batch_id = self._services(), arguments.batch_id
            await owned(services, batch_id, current_caller.get())
            page = await reading.read(services, batch_id, arguments.wait_seconds, arguments.offset, arguments.limit)
            return document_result(page)

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
