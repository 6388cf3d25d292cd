"""Opening an MCP client session to a configured backend, over stdio or streamable HTTP.

Shared by the worker (long-lived sessions) and the API (a short session to list a backend's tools).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client
from mcp.client import Transport
from mcp.client.session import LoggingFnT
from mcp.client.streamable_http import streamable_http_client
from mcp_types import LoggingLevel

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.asking import Answerers, declining
from mcp_batch.backends.failures import describe
from mcp_batch.backends.presented import Presented, SharedPool, env_of, header_of
from mcp_batch.backends.servers_file import Backend, HttpBackend
from mcp_batch.backends.stdio import StdioTransport
from mcp_batch.backends.stdio_pipes import StdioProbe
from mcp_batch.errors import BackendError, BackendUnauthenticated, MCPBatchError

_MAX_TOOL_PAGES = 100  # a paginator that never ends cannot hang start-up
_LISTED = {"name", "title", "description", "input_schema", "output_schema"}  # a tool's fields kept, as they are


@dataclass
class HttpOutcome:
    """The HTTP status behind a failed call (the SDK folds every 4xx/5xx into one JSON-RPC error)."""

    status: int | None = None
    retry_after: float | None = None


# Set by the caller around one call; the SDK runs the POST in a task that copies the caller's context, so the
# response hook below sees this caller's object and no other.
http_outcome: contextvars.ContextVar[HttpOutcome | None] = contextvars.ContextVar("http_outcome", default=None)


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from MCP servers; the caller falls back to its own backoff


async def _record_status(response: httpx2.Response) -> None:
    outcome = http_outcome.get()
    if outcome is not None and response.status_code >= 400:
        outcome.status = response.status_code
        outcome.retry_after = _retry_after(response.headers.get("retry-after"))


def _logging(logs: LoggingFnT | None, level: LoggingLevel | None) -> dict[str, Any]:
    return {} if logs is None else {"logging_callback": logs, "log_level": level}


@asynccontextmanager
async def connect(
    backend: Backend,
    timeout: float,
    answerers: Answerers = declining,
    logs: LoggingFnT | None = None,
    log_level: LoggingLevel | None = None,
    presented: Presented | None = None,
    pool: SharedPool | None = None,
) -> AsyncIterator[Client]:
    """An initialized Client for `backend`; `timeout` bounds each HTTP request (not stdio, which has no requests).
    `presented` is the credential the session carries (a tenant's, or the machine token), in the header or variable
    the backend's `auth` names; `pool` the connection pool an HTTP session sends through (default: its own).
    The client declares elicitation and sampling, so a backend lists the tools that ask; `answerers` answer them.
    `logs` is handed the backend's log notifications (a 2026-07-28 server sends them only when asked, `log_level`).

    A failure while opening it or inside the block is a BackendError saying its root cause in words
    (backends/failures.py); refused credentials (HTTP 401/403) are BackendUnauthenticated."""
    outcome = http_outcome.get()
    token = None
    if outcome is None:  # nobody is recording this session's statuses: record them here
        outcome = HttpOutcome()
        token = http_outcome.set(outcome)
    probe = StdioProbe()
    phase = "opening the session"
    try:
        async with AsyncExitStack() as stack:
            if isinstance(backend, HttpBackend):
                header = header_of(backend)
                http = httpx2.AsyncClient(  # as the SDK's transports make theirs: redirects not followed
                    headers={k: v.get_secret_value() for k, v in backend.headers.items()},
                    timeout=httpx2.Timeout(timeout, read=max(timeout, 300.0)),
                    transport=pool,
                )
                if header is not None and presented is not None:
                    presented.bind(http, *header)
                http.event_hooks["response"].append(_record_status)
                await stack.enter_async_context(http)
                transport = streamable_http_client(backend.url, http_client=http)
                client = await stack.enter_async_context(_client(transport, answerers, logs, log_level))
            else:
                env = {k: v.get_secret_value() for k, v in backend.env.items()} | env_of(backend, presented)
                pipes = StdioTransport(backend.command, backend.args, env, backend.cwd, probe)
                client = await stack.enter_async_context(_client(pipes, answerers, logs, log_level))
            phase = "listing tools"
            yield client
    except MCPBatchError:
        raise
    except Exception as exc:  # the process, if any, has been stopped by now: its exit code is known
        raise await _failure(exc, backend, phase, outcome.status, probe) from exc
    finally:
        if token is not None:
            http_outcome.reset(token)


def _client(
    server: Transport,
    answerers: Answerers,
    logs: LoggingFnT | None,
    log_level: LoggingLevel | None,
) -> Client:
    return Client(
        server,
        cache=None,
        elicitation_callback=answerers.elicit,
        sampling_callback=answerers.sample,
        **_logging(logs, log_level),
    )


async def _failure(exc: Exception, backend: Backend, phase: str, status: int | None, probe: StdioProbe) -> BackendError:
    if status in (401, 403):
        return BackendUnauthenticated(f"the backend answered HTTP {status} while {phase}: it refused the credentials")
    code = probe.exit_code
    line = await probe.last_line() if code is not None else None
    return BackendError(describe(exc, backend, phase, status, code, line), transient=True)


async def list_tools(client: Client) -> list[ToolInfo]:
    """Every tool the backend lists, following pagination."""
    tools: list[ToolInfo] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
            tools.append(ToolInfo(**tool.model_dump(include=_LISTED), annotations=annotations))
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools
