"""The tests' OAuth authorization server: the MCP SDK's authorization-server handlers (metadata, authorize, token,
registration, revocation) over a provider of ours with two accounts, an HTML login and consent page, refresh tokens
that rotate (a spent one is refused and counted), short access tokens, and RFC 7662 introspection for the resource
server (tests/protected_backend.py). `/stats` says what it issued, refreshed and revoked; `/admin/revoke` revokes
every grant of an account, as a user removing the app at the provider would; `/admin/drop-access` only its
access tokens (a token the backend refuses before its time, while the grant stands).

Started as a real process (`python -m tests.oauth_server --port N --fd F`, on a socket its parent bound); not
part of the installed package.
"""

from __future__ import annotations

import argparse
import contextvars
import html
import secrets
import time
from typing import Any
from urllib.parse import parse_qs

import uvicorn
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ACCOUNTS = {"alice": "alice-password", "bob": "bob-password"}
SCOPES = ["mcp", "offline_access"]
_REGISTRATION = ClientRegistrationOptions(enabled=True, valid_scopes=SCOPES)
_REVOCATION = RevocationOptions(enabled=True)
_token_resource: contextvars.ContextVar[str | None] = contextvars.ContextVar("token_resource", default=None)


class Provider:
    """The accounts, clients and grants of this server, in memory."""

    def __init__(self, access_ttl: float, cimd_redirect: str | None) -> None:
        self.access_ttl, self.cimd_redirect = access_ttl, cimd_redirect
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.pending: dict[str, tuple[str, AuthorizationParams]] = {}  # login request id -> (client id, params)
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.spent: set[str] = set()  # rotated-away refresh tokens: presenting one again is counted
        self.stats: dict[str, Any] = {
            "issued": 0,
            "refreshes": 0,
            "spent_refresh_reused": 0,
            "revocations": 0,
            "registrations": 0,
            "machine_tokens": 0,
            "authorize_resources": [],
            "token_resources": [],
            "clients": [],
        }

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id not in self.clients and self.cimd_redirect and client_id.startswith("https://"):
            # A Client ID Metadata Document: a real server fetches it; this one, without TLS in the tests, takes the
            # redirect URI it was started with as the document's
            self.clients[client_id] = OAuthClientInformationFull(
                client_id=client_id,
                token_endpoint_auth_method="none",
                redirect_uris=[AnyUrl(self.cimd_redirect)],
                scope=" ".join(SCOPES),
            )
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.stats["registrations"] += 1
        self.clients[client_info.client_id or ""] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        request_id = secrets.token_urlsafe(16)
        self.pending[request_id] = (client.client_id or "", params)
        self.stats["authorize_resources"].append(params.resource)
        self.stats["clients"].append(client.client_id)
        return f"/login?request={request_id}"

    def grant(self, request_id: str, subject: str) -> str:
        """The redirect back to the client once `subject` consented to the pending request."""
        client_id, params = self.pending.pop(request_id)
        code = "code_" + secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=subject,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, code: str) -> AuthorizationCode | None:
        return self.codes.get(code)

    def issue(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> OAuthToken:
        if _token_resource.get() != resource:  # RFC 8707: the token request names the resource of the grant
            raise TokenError("invalid_target", "the resource does not match the grant's")
        access = "at_" + secrets.token_urlsafe(24)
        refresh = "rt_" + secrets.token_urlsafe(24)
        expires = time.time() + self.access_ttl
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(expires),
            resource=resource,
            subject=subject,
        )
        self.access[access].claims = {"exp_precise": expires, "refresh": refresh}
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        self.stats["issued"] += 1
        self.stats["token_resources"].append(_token_resource.get())
        ttl = max(1, round(self.access_ttl))
        return OAuthToken(access_token=access, expires_in=ttl, refresh_token=refresh, scope=" ".join(scopes))

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[code.code]
        return self.issue(code.client_id, code.scopes, code.resource, code.subject)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        if refresh_token in self.spent:
            self.stats["spent_refresh_reused"] += 1
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.stats["refreshes"] += 1
        del self.refresh[refresh_token.token]
        self.spent.add(refresh_token.token)
        return self.issue(refresh_token.client_id, scopes, refresh_token.resource, refresh_token.subject)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.claims or {}).get("exp_precise", 0) < time.time():
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.stats["revocations"] += 1
        self.revoke_subject(token.subject)

    def revoke_subject(self, subject: str | None) -> None:
        """Revoke every access and refresh token of `subject` (the grant, as a whole)."""
        self.access = {k: v for k, v in self.access.items() if v.subject != subject}
        self.refresh = {k: v for k, v in self.refresh.items() if v.subject != subject}

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull, params: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "not supported here")


class TokenResource:
    """Reads the `resource` field of a token request into a context variable for the provider (the SDK's token
    handler does not hand it over), replaying the body untouched; answers the client-credentials grant itself (the
    SDK's handler takes only the user's grants) with a token whose subject is `client:<id>`."""

    def __init__(self, app: ASGIApp, provider: Provider) -> None:
        self.app = app
        self.provider = provider

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/token":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        form = {name: values[0] for name, values in parse_qs(body.decode()).items()}
        if form.get("grant_type") == "client_credentials":
            await self._client_credentials(form)(scope, receive, send)
            return
        token = _token_resource.set(form.get("resource"))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            await self.app(scope, replay, send)
        finally:
            _token_resource.reset(token)

    def _client_credentials(self, form: dict[str, str]) -> Response:
        client = self.provider.clients.get(form.get("client_id", ""))
        if client is None or client.client_secret is None or client.client_secret != form.get("client_secret"):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        self.provider.stats["machine_tokens"] += 1
        token = _token_resource.set(form.get("resource"))
        try:
            issued = self.provider.issue(
                client.client_id or "", ["mcp"], form.get("resource"), f"client:{client.client_id}"
            )
        finally:
            _token_resource.reset(token)
        body = issued.model_dump(exclude_none=True, exclude={"refresh_token"})
        return JSONResponse(body, headers={"Cache-Control": "no-store"})


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>")


def create_app(issuer: str, provider: Provider, clients: list[str]) -> Starlette:
    for entry in clients:  # pre-registered confidential clients: ID:SECRET:REDIRECT_URI
        client_id, secret, redirect = entry.split(":", 2)
        provider.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            redirect_uris=[AnyUrl(redirect)],
            token_endpoint_auth_method="client_secret_post",
            grant_types=["authorization_code", "refresh_token"],
            scope=" ".join(SCOPES),
        )

    async def login_form(request: Request) -> Response:
        request_id = html.escape(request.query_params.get("request", ""))
        return _page(
            "Sign in",
            f'<form method="post" action="/login"><input type="hidden" name="request" value="{request_id}">'
            '<input name="username"><input name="password" type="password"><button>Sign in</button></form>',
        )

    async def login(request: Request) -> Response:
        form = await request.form()
        request_id, user = str(form.get("request", "")), str(form.get("username", ""))
        if request_id not in provider.pending or ACCOUNTS.get(user) != form.get("password"):
            return _page("Sign in", "<p>Wrong account or password.</p>")
        client_id = html.escape(provider.pending[request_id][0])
        return _page(
            "Consent",
            f'<p>Allow {client_id} to act as {html.escape(user)}?</p><form method="post" action="/consent">'
            f'<input type="hidden" name="request" value="{html.escape(request_id)}">'
            f'<input type="hidden" name="username" value="{html.escape(user)}">'
            '<button name="decision" value="allow">Allow</button>'
            '<button name="decision" value="deny">Deny</button></form>',
        )

    async def consent(request: Request) -> Response:
        form = await request.form()
        request_id = str(form.get("request", ""))
        if request_id not in provider.pending:
            return _page("Consent", "<p>No such request.</p>")
        if form.get("decision") != "allow":
            _, params = provider.pending.pop(request_id)
            target = construct_redirect_uri(str(params.redirect_uri), error="access_denied", state=params.state)
            return RedirectResponse(target, status_code=302)
        return RedirectResponse(provider.grant(request_id, str(form.get("username", ""))), status_code=302)

    async def introspect(request: Request) -> Response:
        form = await request.form()
        access = await provider.load_access_token(str(form.get("token", "")))
        if access is None:
            return JSONResponse({"active": False})
        return JSONResponse(
            {
                "active": True,
                "sub": access.subject,
                "client_id": access.client_id,
                "scope": " ".join(access.scopes),
                "exp": access.expires_at,
                "aud": access.resource,
                "iss": issuer,
            }
        )

    async def stats(request: Request) -> Response:
        return JSONResponse(provider.stats)

    async def admin_revoke(request: Request) -> Response:
        provider.revoke_subject(request.query_params["subject"])
        return Response(status_code=204)

    async def admin_drop_access(request: Request) -> Response:
        subject = request.query_params["subject"]
        provider.access = {k: v for k, v in provider.access.items() if v.subject != subject}
        return Response(status_code=204)

    routes = create_auth_routes(
        provider,
        AnyHttpUrl(issuer),
        client_registration_options=_REGISTRATION,
        revocation_options=_REVOCATION,
    )
    routes += [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/consent", consent, methods=["POST"]),
        Route("/introspect", introspect, methods=["POST"]),
        Route("/stats", stats, methods=["GET"]),
        Route("/admin/revoke", admin_revoke, methods=["POST"]),
        Route("/admin/drop-access", admin_drop_access, methods=["POST"]),
    ]
    if provider.cimd_redirect:
        routes = [_cimd_metadata(issuer), *routes[1:]]
    return Starlette(routes=routes, middleware=[])


def _cimd_metadata(issuer: str) -> Route:
    """The metadata route, also saying the server takes Client ID Metadata Documents."""
    metadata = build_metadata(AnyHttpUrl(issuer), None, _REGISTRATION, _REVOCATION)
    metadata.client_id_metadata_document_supported = True
    return Route("/.well-known/oauth-authorization-server", MetadataHandler(metadata).handle, methods=["GET"])


def main() -> None:
    parser = argparse.ArgumentParser(prog="oauth_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket the parent bound to the port")
    parser.add_argument("--access-ttl", type=float, default=3600.0, help="seconds an access token lives")
    parser.add_argument("--client", action="append", default=[], help="a pre-registered client ID:SECRET:REDIRECT")
    parser.add_argument("--cimd", metavar="REDIRECT", help="take https client ids as metadata documents naming this")
    args = parser.parse_args()
    issuer = f"http://127.0.0.1:{args.port}"
    provider = Provider(args.access_ttl, args.cimd)
    app = create_app(issuer, provider, args.client)
    uvicorn.run(TokenResource(app, provider), fd=args.fd, log_level="warning")


if __name__ == "__main__":
    main()
