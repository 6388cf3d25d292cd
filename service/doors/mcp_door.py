"""The MCP front door: an agent batches calls to many backends in one tool call, over streamable HTTP at `/mcp`.

Four tools — `call_tools_batch`, `submit_batch`, `get_batch`, `list_servers` — over the same core as the REST routes:
a batch is submitted through `Services.submit`, so it is validated, stored, queued and run by the workers exactly as
one POSTed to `/v1/batches` is, and its id works on either door.

Failures come back as tool errors (`isError`) listing each problem's location and message, never a submitted value:
a secret in a call's `arguments` must not be echoed into the agent's transcript. That covers the SDK's own argument
validation too, whose message would quote the offending input (see `_Tool`).
"""

# No `from __future__ import annotations` here: the SDK reads each tool's parameter types (and their descriptions,
# which carry the configured limits) from the live annotations of functions defined inside `build_mcp_server`.
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError
from redis.exceptions import RedisError
from starlette.routing import Route

from mcp_batch.errors import Backpressure, BatchNotFound, Conflict, Forbidden, InvalidBatch
from mcp_batch.models import MAX_OFFSET, BatchDocument, BatchRequest, Call, Mode, OnError, ServerInfo
from mcp_batch.settings import Settings
from mcp_batch.tenants import KeyRing
from service.application import reading, submitting
from service.application.backends_info import describe_servers
from service.application.services import Services, owned
from service.auth import Authenticated, current_caller

logger = logging.getLogger(__name__)

# Running tools on arbitrary backends: it may write (read_only=false) and the backends are outside this service.
_RUNS_TOOLS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)
# Reads of this service's own state (list_servers may refresh a backend's tools/list, which changes nothing).
_READS = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

_INSTRUCTIONS = (
    "Batches of MCP tool calls to the backends this service is configured with (list_servers shows them and their "
    "tools). Use call_tools_batch when one turn needs many calls; submit_batch + get_batch for long batches."
)

_BATCH_HELP = """

Each call names a backend (`server`, from list_servers), a `tool` and its `arguments`, with an optional `id` unique \
in the batch (default: its index). The calls run on the service's workers under each backend's rate and concurrency \
limits: `mode="concurrent"` runs up to `max_concurrency` at once, `"serial"` one after another in order. One call's \
failure does not stop the rest unless `on_error="stop"` (then nothing new starts and the rest are `skipped`).

With `read_only=true` (the default) only read-only tools run (annotated readOnlyHint, or listed read-only in the \
servers file); any other call ends `blocked` and never reaches its backend. `read_only=false` lets write and \
destructive tools run. This tool carries the authority of every tool it can call: a client rule keyed on a nested \
tool's name does not fire for a call made through it.

The document: `status` (queued, running, cancelling, then completed, cancelled or expired), `ok` (true only when \
ended and every call is ok), `counts`, \
`failed_ids`, and `results` in call order, each with its `status` (ok, error, timeout, blocked, unknown_server, \
unknown_tool, skipped, ...), `content`, `structured_content` and `error` (`code`, `message`). A malformed batch (no \
calls, duplicate ids, too many calls) is refused whole, listing each problem's location; nothing is run."""

CallsArg = Annotated[list[Call], Field(description="The calls, in order: {id?, server, tool, arguments?} each.")]
ModeArg = Annotated[Mode, Field(description="`concurrent`: up to max_concurrency at once; `serial`: in order.")]
OnErrorArg = Annotated[OnError, Field(description="`stop`: start nothing new after the first failing call.")]
ConcurrencyArg = Annotated[
    int | None, Field(ge=1, description="Calls of this batch in flight at once; default from the service.")
]
ReadOnlyArg = Annotated[bool, Field(description="Run only read-only tools; others end `blocked` (default true).")]


class _Tool(Tool):
    """A tool whose argument errors name each field and problem, never the value given (it may be a secret)."""

    async def run(self, arguments: dict[str, Any], context: Context[Any, Any], convert_result: bool = False) -> Any:
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except ToolError as exc:
            # The SDK reports arguments that fail the input schema as a ToolError caused by pydantic's error, whose
            # text quotes each input; a crash (UnexpectedToolError) already carries no detail.
            if type(exc) is not ToolError or not isinstance(exc.__cause__, ValidationError):
                raise
            problems = [(tuple(e["loc"]), e["msg"]) for e in exc.__cause__.errors()]
            raise ToolError(_problems(f"Error executing tool {self.name}: invalid arguments", problems)) from None


def _problems(title: str, problems: Sequence[tuple[tuple[str | int, ...], str]]) -> str:
    lines = [f"- {'.'.join(map(str, loc)) or '(arguments)'}: {msg}" for loc, msg in problems]
    return "\n".join([f"{title}; nothing was run:", *lines])


@contextmanager
def _tool_errors() -> Iterator[None]:
    """Core errors as tool errors the agent can act on (the REST door maps the same ones to 422/404/503)."""
    try:
        yield
    except InvalidBatch as exc:
        raise ToolError(_problems("invalid batch", [(p.loc, p.msg) for p in exc.problems])) from None
    except Forbidden as exc:
        raise ToolError(_problems("not allowed for this key", [(p.loc, p.msg) for p in exc.problems])) from None
    except (Backpressure, Conflict) as exc:
        raise ToolError(str(exc)) from None
    except BatchNotFound:
        raise ToolError("no batch with that id (it never existed, or it has expired)") from None
    except RedisError as exc:
        logger.error("Redis error: %s", type(exc).__name__)
        raise ToolError("storage unavailable, try again shortly") from None


def build_mcp_server(services: Callable[[], Services], settings: Settings) -> MCPServer:
    """The MCP server whose tools run batches through `services()` (read per call: the lifespan builds them)."""
    sync_wait, max_wait = settings.sync_wait_seconds, settings.max_wait_seconds
    WaitArg = Annotated[
        float,
        Field(ge=0, description=f"Seconds to wait for the batch to finish (at most {sync_wait:g}); then the document."),
    ]

    async def submit_batch(
        calls: CallsArg,
        mode: ModeArg = Mode.concurrent,
        on_error: OnErrorArg = OnError.continue_,
        max_concurrency: ConcurrencyArg = None,
        read_only: ReadOnlyArg = True,
    ) -> BatchDocument:
        with _tool_errors():
            request = BatchRequest(
                calls=calls, mode=mode, on_error=on_error, max_concurrency=max_concurrency, read_only=read_only
            )
            app = services()
            return await reading.document(app, (await submitting.submit(app, request, current_caller.get())).batch_id)

    async def call_tools_batch(
        calls: CallsArg,
        mode: ModeArg = Mode.concurrent,
        on_error: OnErrorArg = OnError.continue_,
        max_concurrency: ConcurrencyArg = None,
        read_only: ReadOnlyArg = True,
        wait_seconds: WaitArg = sync_wait,
    ) -> BatchDocument:
        submitted = await submit_batch(calls, mode, on_error, max_concurrency, read_only)
        with _tool_errors():
            return await reading.read(services(), submitted.id, min(wait_seconds, sync_wait))

    async def get_batch(
        batch_id: Annotated[str, Field(description="The `id` of a batch document.")],
        wait_seconds: Annotated[
            float, Field(ge=0, description=f"Wait up to this long for the batch to finish (at most {max_wait:g}).")
        ] = 0,
        offset: Annotated[int, Field(ge=0, le=MAX_OFFSET, description="First item of `results` to return.")] = 0,
        limit: Annotated[int | None, Field(ge=1, le=10_000, description="Most items of `results` to return.")] = None,
    ) -> BatchDocument:
        with _tool_errors():
            app = services()
            await owned(app, batch_id, current_caller.get())
            return await reading.read(app, batch_id, wait_seconds, offset, limit)

    async def list_servers() -> list[ServerInfo]:
        with _tool_errors():
            return await describe_servers(services(), current_caller.get())

    tools = [
        _Tool.from_function(
            call_tools_batch,
            description="Run a batch of MCP tool calls on the configured backends and return one document with "
            f"every call's result. Waits up to `wait_seconds` (at most {sync_wait:g}) for the batch to finish; a "
            "document still `queued` or `running` carries the `id` to pass to get_batch for the rest." + _BATCH_HELP,
            annotations=_RUNS_TOOLS,
        ),
        _Tool.from_function(
            submit_batch,
            description="Queue a batch of MCP tool calls and return its document at once (status `queued`); read it "
            "later with get_batch. For batches that take longer than one turn should wait." + _BATCH_HELP,
            annotations=_RUNS_TOOLS,
        ),
        _Tool.from_function(
            get_batch,
            description="The document of a batch submitted earlier (by call_tools_batch, submit_batch or the REST "
            f"API). `wait_seconds` > 0 holds the call until the batch completes or that time passes (at most "
            f"{max_wait:g}); `offset`/`limit` return one page of `results`. Results are kept for "
            f"{settings.retention_seconds // 3600} h after a batch finishes.",
            annotations=_READS,
        ),
        _Tool.from_function(
            list_servers,
            description="The backends a batch can call: each one's name, transport, timeout, limits and their current "
            "use, and its tools with input schemas and annotations (readOnlyHint: runs in a read_only batch). A "
            "backend that cannot be reached is listed with `tools: null` and `tools_error`.",
            annotations=_READS,
        ),
    ]
    return MCPServer("mcp-batch", instructions=_INSTRUCTIONS, tools=tools, log_level="WARNING")


def mcp_routes(server: MCPServer, keyring: KeyRing | None) -> list[Route]:
    """`/mcp` and `/mcp/`, both served by the server's streamable-HTTP transport.

    Exact routes rather than a mount: a mount at /mcp would also swallow `/mcp/tools/call` (the Gumloop door) unless
    it were registered after it, and the SDK client does not follow the slash redirect a mount answers `/mcp` with.
    The session manager this creates must be run by the app's lifespan (`server.session_manager.run()`).
    """
    server.streamable_http_app(
        # Stateless: no session lives in one API process, so any replica behind a load balancer answers any request
        # (a batch's state is in Redis), and the tools never call back to the client.
        stateless_http=True,
        # No Host/Origin allow-list. The SDK turns one on by default (its `host` argument defaults to 127.0.0.1), which
        # answers 421 to every request that reaches the API under another name (0.0.0.0 behind a proxy or a DNS name).
        # It would protect nothing here: the REST routes on the same port accept any Host, so a DNS-rebinding page
        # could POST /v1/batches just the same. Host checking belongs in front of the whole app (the reverse proxy, or
        # Starlette's TrustedHostMiddleware). POSTs must still be application/json (the SDK checks that regardless).
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    endpoint = Authenticated(StreamableHTTPASGIApp(server.session_manager), keyring)
    return [Route("/mcp", endpoint), Route("/mcp/", endpoint)]
