"""The API key is checked before the body is read: pure ASGI middleware in front of every route that needs a key.

FastAPI reads and parses a request's body before it resolves the route's dependencies, so without this a caller with
no key (or a wrong one) gets its 401 only once its body, up to the body limit, has been read and parsed on the event
loop. Here such a request is answered from its headers alone and its body is never read. The routes that need a key
are found once, among the routes of the routers the app includes: those that depend on the caller (`get_caller`),
and /metrics unless MCP_BATCH_METRICS_PUBLIC (`service/route_tree.py` reads what a route depends on). Health routes,
the OpenAPI document and paths no route matches need no key and pass through.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_batch.errors import Unauthenticated
from mcp_batch.tenants import KeyRing
from service import route_tree
from service.auth import get_caller, identify, unauthorized

METRICS_PATH = "/metrics"


def keyed_routes(routes: Sequence[BaseRoute], metrics_public: bool) -> list[BaseRoute]:
    """The routes a request may reach only with a valid key."""
    return [
        route
        for route in routes
        if isinstance(route, APIRoute)
        and (route_tree.depends_on(route, get_caller) or (route.path == METRICS_PATH and not metrics_public))
    ]


class KeyFirst:
    """401 from the headers alone for a request to a keyed route without a valid `Authorization: Bearer <key>`."""

    def __init__(self, app: ASGIApp, keyring: KeyRing, routes: Sequence[BaseRoute], metrics_public: bool) -> None:
        self.app = app
        self.keyring = keyring
        self._keyed = keyed_routes(routes, metrics_public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for route in self._keyed:
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    refusal = self._refusal(scope)
                    if refusal is not None:
                        scope.update(child_scope)  # as the router would: the request metrics label it by its route
                        await unauthorized(refusal)(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> str | None:
        authorization = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        try:
            identify(authorization.decode("latin-1") if authorization is not None else None, self.keyring)
        except Unauthenticated as exc:
            return str(exc)
        return None
