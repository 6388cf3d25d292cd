"""GET /ui/sign-in.json: what the dashboard needs to sign a user in at the identity provider (authorization code
with PKCE, in the browser), when an issuer names a `dashboard_client_id`; 404 otherwise, and the page asks for a key
only. The page posts the code to the provider's token endpoint itself, so the dashboard's Content-Security-Policy
lets it connect to the issuer's origin (`connect_sources`)."""

from __future__ import annotations

import urllib.parse

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mcp_batch.issuers import OAuthIssuer
from mcp_batch.settings import Settings
from mcp_batch.tenants import Right
from service.oauth.issuer_keys import IssuerUnavailable
from service.oauth.tokens import TokenCheck

router = APIRouter(include_in_schema=False)


def dashboard_issuer(settings: Settings) -> OAuthIssuer | None:
    """The issuer the dashboard offers to sign in at, if any."""
    if "oauth" not in settings.auth:
        return None
    return next((issuer for issuer in settings.oauth_issuers if issuer.dashboard_client_id), None)


def connect_sources(settings: Settings) -> tuple[str, ...]:
    """The origins the page may fetch from besides its own: the sign-in issuer's."""
    issuer = dashboard_issuer(settings)
    if issuer is None:
        return ()
    parts = urllib.parse.urlsplit(issuer.issuer)
    return (f"{parts.scheme}://{parts.netloc}",)


@router.get("/ui/sign-in.json")
async def sign_in_offer(request: Request) -> JSONResponse:
    settings: Settings = request.app.state.services.settings
    tokens: TokenCheck | None = request.app.state.token_check
    issuer = dashboard_issuer(settings)
    if issuer is None or tokens is None or settings.public_url is None:
        return JSONResponse({"detail": "no sign-in is configured for the dashboard"}, status_code=404)
    try:
        metadata = await tokens.metadata(issuer.issuer)
    except IssuerUnavailable as exc:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})
    scopes = [getattr(issuer.scopes, right.value) for right in (Right.read, Right.write)]
    offer = {
        "issuer": issuer.issuer,
        "authorization_endpoint": metadata.get("authorization_endpoint"),
        "token_endpoint": metadata.get("token_endpoint"),
        "client_id": issuer.dashboard_client_id,
        "resource": settings.public_url,
        "scope": " ".join(scopes),
    }
    return JSONResponse(offer, headers={"Cache-Control": "no-store"})
