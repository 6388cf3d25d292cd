"""Connecting a tenant to an OAuth-protected backend: POST /v1/credentials/{server}/connect starts the
authorization-code flow (the URL to open in a browser); GET /v1/oauth/callback is where the authorization server
sends that browser back. The callback takes no API key (a browser redirect carries none): its state names the flow."""

from __future__ import annotations

import html
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mcp_batch.models import ErrorDetail
from service.application import connecting
from service.application.connecting import CallbackOutcome, ConnectStarted
from service.auth import AUTH_RESPONSES, CallerDep
from service.deps import ServicesDep

router = APIRouter(tags=["credentials"])

# The page's URL held the code and state: no referrer carries it on, no cache keeps the page.
_PAGE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"}

_CONNECT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **AUTH_RESPONSES,
    409: {"model": ErrorDetail, "description": "The server does not use OAuth, or MCP_BATCH_PUBLIC_URL is unset."},
    404: {"model": ErrorDetail, "description": "No such server is configured for this key."},
    502: {"model": ErrorDetail, "description": "The server's authorization could not be discovered or used."},
}


@router.post(
    "/v1/credentials/{server}/connect", summary="Start connecting an OAuth backend", responses=_CONNECT_RESPONSES
)
async def connect(server: str, services: ServicesDep, caller: CallerDep) -> ConnectStarted:
    """The authorization URL to open in a browser, where the tenant logs in to the backend's authorization server
    and consents; it comes back to the service's callback, which stores the tokens (sealed) for this tenant and
    server. The link works once, until `expires_at`. Needs the `credentials` right (403)."""
    return await connecting.connect(services, caller, server)


_REFUSED: dict[int | str, dict[str, Any]] = {
    403: {"content": {"text/html": {}}, "description": "An HTML page saying why the link is refused."}
}


@router.get(
    "/v1/oauth/start",
    summary="Start a connect a waiting call asked for",
    response_class=HTMLResponse,
    status_code=302,
    responses={302: {"description": "To the authorization server."}, **_REFUSED},
)
async def oauth_start(services: ServicesDep, ticket: str = "") -> Response:
    """The link of a call waiting on its tenant to connect an OAuth backend (a URL-mode question of its batch): a
    redirect (302) to the authorization server, as the connect route's URL; a page saying why not (403) when the
    link is not genuine or its wait is over."""
    started = await connecting.start(services, ticket)
    if isinstance(started, ConnectStarted):
        return RedirectResponse(started.authorization_url, status_code=302, headers=_PAGE_HEADERS)
    return _page(started)


@router.get(
    "/v1/oauth/callback",
    summary="Where the authorization server sends the browser back",
    response_class=HTMLResponse,
    responses=_REFUSED,
)
async def oauth_callback(
    services: ServicesDep, code: str | None = None, state: str | None = None, error: str | None = None
) -> HTMLResponse:
    """Finish a connect: a page saying the server is connected (200), or why the link was refused (403): a state
    this service did not issue, one already used or expired, or the authorization server's refusal."""
    return _page(await connecting.callback(services, code, state, error))


def _page(outcome: CallbackOutcome) -> HTMLResponse:
    body = (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(outcome.title)}</title></head>"
        f"<body><h1>{html.escape(outcome.title)}</h1><p>{html.escape(outcome.message)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=200 if outcome.connected else 403, headers=_PAGE_HEADERS)
