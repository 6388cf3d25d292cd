"""Host and Origin checked before any route runs: pure ASGI middleware around the whole app (app.py), so it holds on
REST, the event stream, the Gumloop route, the MCP door, the dashboard, health and the docs alike, and a refused
request's body is never read.

What is served is `HostPolicy`'s to say (mcp_batch/contract/host_policy.py). The address a request arrived at is the
ASGI scope's `server`, which uvicorn fills in from the connection's own socket: the address the API is bound to, or,
bound to every address (0.0.0.0), the one the client reached. A Host the policy refuses is answered 421 naming
MCP_BATCH_ALLOWED_HOSTS; a browser Origin it refuses, 403 naming MCP_BATCH_ALLOWED_ORIGINS.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_batch.errors import Forbidden, HostNotAllowed, Problem
from mcp_batch.host_policy import HostPolicy
from service.http_errors import forbidden_response, host_refusal

_FOREIGN_ORIGIN = Problem(
    ("header", "Origin"),
    "requests from this origin are refused (a page of another site must not drive this service): add the origin "
    "to MCP_BATCH_ALLOWED_ORIGINS",
    "origin_not_allowed",
)


class HostGuard:
    """421 for a Host the service does not serve, 403 for a browser Origin that is neither its own nor listed."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hosts = [v.decode("latin-1") for k, v in scope["headers"] if k == b"host"]
        origins = [v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"]
        server = scope.get("server")
        arrived_at = server[0] if server else None
        host = hosts[0] if len(hosts) == 1 else None
        if len(hosts) > 1 or not self.policy.host_allowed(host, arrived_at):
            await host_refusal(HostNotAllowed())(scope, receive, send)
            return
        if origins and (len(origins) > 1 or not self.policy.origin_allowed(origins[0], host)):
            await forbidden_response(Forbidden([_FOREIGN_ORIGIN]))(scope, receive, send)
            return
        await self.app(scope, receive, send)
