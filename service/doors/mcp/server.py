"""The MCP front door: an agent batches calls to many backends in one tool call, over streamable HTTP at `/mcp`.

Seven tools (tools.py) over the same core as the REST routes, so a batch id works on either door. A client that
declares the tasks extension may get a task for a long batch (tasks.py); with the proxy on, every backend tool is
listed too (proxy.py). Stateless: any API replica answers any request.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable

from mcp.server.context import ServerMiddleware
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from mcp_batch.settings import Settings
from service.application.services import Services
from service.doors.mcp.hints import caller_hints
from service.doors.mcp.listen import TaskListen
from service.doors.mcp.proxy import ProxyTools
from service.doors.mcp.tasks import BatchTasks
from service.doors.mcp.tools import BatchTools

_INSTRUCTIONS = (
    "Batches of MCP tool calls to the backends this service is configured with (list_servers shows them and their "
    "tools). Use call_tools_batch when one turn needs many calls; submit_batch + get_batch for long batches; "
    "get_item for one result whole."
)


def build_mcp_server(services: Callable[[], Services], settings: Settings) -> MCPServer:
    """The MCP server whose tools run batches through `services()` (read per call: the lifespan builds them)."""
    proxy = ProxyTools(services, settings) if settings.mcp_proxy else None
    middleware: list[ServerMiddleware[object]] = [
        caller_hints,
        TaskListen(
            services,
            settings.mcp_task_poll_ms,
            settings.mcp_listens_per_key,
            settings.events_check_seconds,
            settings.mcp_listen_lease_seconds,
        ),
    ]
    if proxy is not None:
        middleware.append(proxy.listing)
    return MCPServer(
        "mcp-batch",
        version=importlib.metadata.version("mcp-batch"),  # the installed package's: serverInfo.version
        instructions=_INSTRUCTIONS,
        tools=list(BatchTools(services, settings).tools()),
        log_level="WARNING",
        extensions=[BatchTasks(services, settings, proxy)],
        middleware=middleware,
    )


def mcp_routes(server: MCPServer, max_body_bytes: int) -> list[Route]:
    """`/mcp` and `/mcp/`, both served by the server's streamable-HTTP transport.

    Exact routes rather than a mount: a mount at /mcp would also swallow `/mcp/tools/call` (the Gumloop door) unless
    it were registered after it, and the SDK client does not follow the slash redirect a mount answers `/mcp` with.
    The session manager this creates must be run by the app's lifespan (`server.session_manager.run()`); the caller is
    named by the app's sign-in (service/auth.py) before a request gets here.
    """
    server.streamable_http_app(
        # Stateless: no session lives in one API process, so any replica behind a load balancer answers any request
        # (a batch's state is in Redis), and the tools never call back to the client.
        stateless_http=True,
        # The service's own ceiling: the app's BodyLimit answers past it, in JSON, before the SDK's (text/plain, at
        # 4 MiB by default) could.
        max_request_body_size=max_body_bytes,
        # Host and Origin are checked in front of the whole app (service/host_guard.py), for every route alike; the
        # SDK's own check would refuse the names a deployment lists in MCP_BATCH_ALLOWED_HOSTS. POSTs must still be
        # application/json (the SDK checks that regardless).
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    endpoint = StreamableHTTPASGIApp(server.session_manager)
    return [Route("/mcp", endpoint), Route("/mcp/", endpoint)]
