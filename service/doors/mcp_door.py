"""The MCP front door: an agent batches calls to many backends in one tool call, over streamable HTTP at `/mcp`.

Five tools — `call_tools_batch`, `submit_batch`, `get_batch`, `get_item`, `list_servers` — over the same core as the
REST routes: a batch is submitted through `submitting.submit`, so it is validated, stored, queued and run by the
workers exactly as one POSTed to `/v1/batches` is, and its id works on either door. The batch tools take every
option REST takes. Answers are compact JSON (mcp_render.py); unknown arguments and core errors are tool errors that
name each problem and never a submitted value (mcp_strict.py). A client that declares the tasks extension may get a
task for a long batch (mcp_tasks.py); with the proxy on, every backend tool is listed too (mcp_proxy.py).
"""

# No `from __future__ import annotations` here: the SDK reads each tool's parameter types (and their descriptions,
# which carry the configured limits) from the live annotations of functions defined inside `build_mcp_server`.
import importlib.metadata
from collections.abc import Callable
from typing import Annotated

from mcp.server.context import ServerMiddleware
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field
from starlette.routing import Route

from mcp_batch.models import (
    MAX_DEADLINE_SECONDS,
    MAX_OFFSET,
    BatchDocument,
    BatchRequest,
    Call,
    ItemPage,
    Mode,
    OnError,
    ServerInfo,
)
from mcp_batch.settings import Settings
from mcp_batch.store.idempotency import MAX_KEY_LENGTH, check_key
from mcp_batch.tenants import KeyRing
from service.application import reading, submitting
from service.application.backends_info import describe_servers
from service.application.services import Services, owned
from service.auth import Authenticated, current_caller
from service.doors.mcp_proxy import ProxyTools
from service.doors.mcp_render import document_result, item_result, listing_result
from service.doors.mcp_strict import StrictTool, tool_errors
from service.doors.mcp_tasks import BatchTasks, listen_gate, wait_cap
from service.doors.mcp_unauthorized import jsonrpc_unauthorized

# Running tools on arbitrary backends: it may write (read_only=false) and the backends are outside this service.
_RUNS_TOOLS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
# Reads of this service's own state (list_servers may refresh a backend's tools/list, which changes nothing).
_READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

_INSTRUCTIONS = (
    "Batches of MCP tool calls to the backends this service is configured with (list_servers shows them and their "
    "tools). Use call_tools_batch when one turn needs many calls; submit_batch + get_batch for long batches; "
    "get_item for one result whole."
)

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


def _about(name: str) -> str | None:
    return BatchRequest.model_fields[name].description


CallsArg = Annotated[list[Call], Field(description="The calls, in order: {id?, server, tool, arguments?} each.")]
ModeArg = Annotated[Mode, Field(description=_about("mode"))]
OnErrorArg = Annotated[OnError, Field(description=_about("on_error"))]
ConcurrencyArg = Annotated[int | None, Field(ge=1, description=_about("max_concurrency"))]
ReadOnlyArg = Annotated[bool, Field(description=_about("read_only"))]
BudgetArg = Annotated[int | None, Field(ge=1024, description=_about("response_max_bytes"))]
DeadlineArg = Annotated[float | None, Field(gt=0, le=MAX_DEADLINE_SECONDS, description=_about("deadline_seconds"))]
RetentionArg = Annotated[int | None, Field(ge=1, description=_about("retention_seconds"))]
WebhookArg = Annotated[str | None, Field(description=_about("webhook_url"))]
KeyArg = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        description="As REST's Idempotency-Key: the same key again with the same batch answers with the batch the "
        "first call made (nothing new is run); with a different batch it is refused.",
    ),
]
BatchIdArg = Annotated[str, Field(description="The `id` of a batch document.")]


def build_mcp_server(services: Callable[[], Services], settings: Settings) -> MCPServer:
    """The MCP server whose tools run batches through `services()` (read per call: the lifespan builds them)."""
    sync_wait, max_wait = settings.sync_wait_seconds, settings.max_wait_seconds
    WaitArg = Annotated[
        float,
        Field(ge=0, description=f"Seconds to wait for the batch to finish (at most {sync_wait:g}); then the document."),
    ]

    async def submitted(
        calls: list[Call],
        mode: Mode,
        on_error: OnError,
        max_concurrency: int | None,
        read_only: bool,
        response_max_bytes: int | None,
        deadline_seconds: float | None,
        retention_seconds: int | None,
        webhook_url: str | None,
        idempotency_key: str | None,
    ) -> str:
        """Submit (once per idempotency key), as POST /v1/batches does; the batch id."""
        try:
            check_key(idempotency_key)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        request = BatchRequest(
            calls=calls,
            mode=mode,
            on_error=on_error,
            max_concurrency=max_concurrency,
            read_only=read_only,
            response_max_bytes=response_max_bytes,
            deadline_seconds=deadline_seconds,
            retention_seconds=retention_seconds,
            webhook_url=webhook_url,
        )
        return (await submitting.submit(services(), request, current_caller.get(), idempotency_key)).batch_id

    async def submit_batch(
        calls: CallsArg,
        mode: ModeArg = Mode.concurrent,
        on_error: OnErrorArg = OnError.continue_,
        max_concurrency: ConcurrencyArg = None,
        read_only: ReadOnlyArg = True,
        response_max_bytes: BudgetArg = None,
        deadline_seconds: DeadlineArg = None,
        retention_seconds: RetentionArg = None,
        webhook_url: WebhookArg = None,
        idempotency_key: KeyArg = None,
    ) -> Annotated[CallToolResult, BatchDocument]:
        options = (response_max_bytes, deadline_seconds, retention_seconds, webhook_url, idempotency_key)
        with tool_errors():
            batch_id = await submitted(calls, mode, on_error, max_concurrency, read_only, *options)
            return document_result(await reading.document(services(), batch_id))

    async def call_tools_batch(
        calls: CallsArg,
        mode: ModeArg = Mode.concurrent,
        on_error: OnErrorArg = OnError.continue_,
        max_concurrency: ConcurrencyArg = None,
        read_only: ReadOnlyArg = True,
        response_max_bytes: BudgetArg = None,
        deadline_seconds: DeadlineArg = None,
        retention_seconds: RetentionArg = None,
        webhook_url: WebhookArg = None,
        idempotency_key: KeyArg = None,
        wait_seconds: WaitArg = sync_wait,
    ) -> Annotated[CallToolResult, BatchDocument]:
        options = (response_max_bytes, deadline_seconds, retention_seconds, webhook_url, idempotency_key)
        cap = wait_cap.get()  # set when the client takes a task instead of a long wait
        wait = min(wait_seconds, sync_wait) if cap is None else min(wait_seconds, sync_wait, cap)
        with tool_errors():
            batch_id = await submitted(calls, mode, on_error, max_concurrency, read_only, *options)
            return document_result(await reading.read(services(), batch_id, wait))

    async def get_batch(
        batch_id: BatchIdArg,
        wait_seconds: Annotated[
            float, Field(ge=0, description=f"Wait up to this long for the batch to finish (at most {max_wait:g}).")
        ] = 0,
        offset: Annotated[int, Field(ge=0, le=MAX_OFFSET, description="First item of `results` to return.")] = 0,
        limit: Annotated[int | None, Field(ge=1, le=10_000, description="Most items of `results` to return.")] = None,
    ) -> Annotated[CallToolResult, BatchDocument]:
        with tool_errors():
            app = services()
            await owned(app, batch_id, current_caller.get())
            return document_result(await reading.read(app, batch_id, wait_seconds, offset, limit))

    async def get_item(
        batch_id: BatchIdArg,
        item_id: Annotated[str, Field(min_length=1, description="The item's `id` (its call's id, or its index).")],
        cursor: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=500,
                pattern=r"^[A-Za-z0-9_-]+$",
                description="The `next_cursor` of a truncated copy of this item, or of the page before.",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, ItemPage]:
        with tool_errors():
            app = services()
            await owned(app, batch_id, current_caller.get())
            return item_result(await reading.item(app, batch_id, item_id, cursor))

    async def list_servers() -> Annotated[CallToolResult, list[ServerInfo]]:
        with tool_errors():
            return listing_result(await describe_servers(services(), current_caller.get()))

    tools = [
        StrictTool.build(
            call_tools_batch,
            "Run a batch of MCP tool calls on the configured backends and return one document with every call's "
            f"result. Waits up to `wait_seconds` (at most {sync_wait:g}) for the batch to finish; a document still "
            "`queued` or `running` carries the `id` to pass to get_batch for the rest." + _BATCH_HELP,
            _RUNS_TOOLS,
        ),
        StrictTool.build(
            submit_batch,
            "Queue a batch of MCP tool calls and return its document at once (status `queued`); read it later with "
            "get_batch. For batches that take longer than one turn should wait." + _BATCH_HELP,
            _RUNS_TOOLS,
        ),
        StrictTool.build(
            get_batch,
            "The document of a batch submitted earlier (by call_tools_batch, submit_batch or the REST API). "
            f"`wait_seconds` > 0 holds the call until the batch completes or that time passes (at most {max_wait:g}); "
            f"`offset`/`limit` return one page of `results`. Results are kept for "
            f"{settings.retention_seconds // 3600} h after a batch finishes.",
            _READS,
        ),
        StrictTool.build(
            get_item,
            "One item of a batch, whole (as GET /v1/batches/{id}/items/{item_id}): for an item the document shrank "
            "to fit its budget (`truncated`). When its content is larger than one answer, a page of it and "
            "`next_cursor`: call again with `cursor` for the next page (structured content comes on the first).",
            _READS,
        ),
        StrictTool.build(
            list_servers,
            "The backends a batch can call: each one's name, transport, timeout, limits and their current use, and "
            "its tools with input schemas and annotations (readOnlyHint: runs in a read_only batch). A backend that "
            "cannot be reached is listed with `tools: null` and `tools_error`.",
            _READS,
        ),
    ]
    proxy = ProxyTools(services, settings) if settings.mcp_proxy else None
    middleware: list[ServerMiddleware[object]] = [listen_gate]
    if proxy is not None:
        middleware.append(proxy.listing)
    return MCPServer(
        "mcp-batch",
        version=importlib.metadata.version("mcp-batch"),  # the installed package's: serverInfo.version
        instructions=_INSTRUCTIONS,
        tools=list(tools),
        log_level="WARNING",
        extensions=[BatchTasks(services, settings, proxy)],
        middleware=middleware,
    )


def mcp_routes(server: MCPServer, keyring: KeyRing | None, max_body_bytes: int) -> list[Route]:
    """`/mcp` and `/mcp/`, both served by the server's streamable-HTTP transport.

    Exact routes rather than a mount: a mount at /mcp would also swallow `/mcp/tools/call` (the Gumloop door) unless
    it were registered after it, and the SDK client does not follow the slash redirect a mount answers `/mcp` with.
    The session manager this creates must be run by the app's lifespan (`server.session_manager.run()`).
    """
    server.streamable_http_app(
        # Stateless: no session lives in one API process, so any replica behind a load balancer answers any request
        # (a batch's state is in Redis), and the tools never call back to the client.
        stateless_http=True,
        # The service's own ceiling: the app's BodyLimit answers past it, in JSON, before the SDK's (text/plain, at
        # 4 MiB by default) could.
        max_request_body_size=max_body_bytes,
        # No Host/Origin allow-list. The SDK turns one on by default (its `host` argument defaults to 127.0.0.1), which
        # answers 421 to every request that reaches the API under another name (0.0.0.0 behind a proxy or a DNS name).
        # It would protect nothing here: the REST routes on the same port accept any Host, so a DNS-rebinding page
        # could POST /v1/batches just the same. Host checking belongs in front of the whole app (the reverse proxy, or
        # Starlette's TrustedHostMiddleware). POSTs must still be application/json (the SDK checks that regardless).
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    endpoint = Authenticated(StreamableHTTPASGIApp(server.session_manager), keyring, jsonrpc_unauthorized)
    return [Route("/mcp", endpoint), Route("/mcp/", endpoint)]
