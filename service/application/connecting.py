"""Use cases of connecting a tenant to an OAuth-protected backend: starting the authorization-code flow (the URL the
tenant's browser opens) and finishing it at the callback (the code redeemed, the tokens stored sealed).

Starting: discovery (credentials/discovery.py), the client (a Client ID Metadata Document URL when the authorization
server takes one, else the servers file's pre-registered client, else one registered dynamically, RFC 7591, and kept
for every tenant's next connect), PKCE S256 and the RFC 8707 resource, and the pending state (credentials/
flow_state.py). The redirect URI is always MCP_BATCH_PUBLIC_URL's, never one a request names.

Finishing refuses, with a reason a person can read (and never the state, the code or anything sent), a state this
service did not issue, one already used or past its time, one whose record is not genuine, and an authorization
server's error; the code is redeemed with the verifier kept for that state only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx2
from mcp.client.auth import PKCEParameters
from mcp.client.auth.exceptions import OAuthRegistrationError
from mcp.client.auth.oauth2 import check_registration_usable
from mcp.client.auth.utils import (
    create_client_registration_request,
    get_client_metadata_scopes,
    handle_registration_response,
    should_use_client_metadata_url,
)
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl, BaseModel, SecretStr

from mcp_batch.backends.servers_file import HttpBackend, OAuthAuth
from mcp_batch.credentials import flow_state, grants
from mcp_batch.credentials.discovery import Discovery, discover
from mcp_batch.credentials.record import OAuthClient
from mcp_batch.errors import Conflict, OAuthGrantRefused, OAuthUnavailable, SealBroken, ServerNotFound
from mcp_batch.records import iso
from mcp_batch.store.cursor_secret import cursor_secret
from mcp_batch.tenants import Caller, Right, require
from service.application.services import Services

CALLBACK_PATH = "/v1/oauth/callback"
_GRANTS = ["authorization_code", "refresh_token"]
_HTTP_SECONDS = 15.0  # each request to the backend or its authorization server
_REFUSED = "Not connected"  # the title of every page refusing a link


class ConnectStarted(BaseModel):
    """Where the tenant's browser goes to connect, and until when that link works."""

    authorization_url: str
    expires_at: str


@dataclass(frozen=True)
class CallbackOutcome:
    """What the callback page says: connected, or refused and why."""

    connected: bool
    title: str
    message: str
    server: str | None = None


class _Registered(BaseModel):
    redirect_uri: str
    client: OAuthClient


def redirect_uri(services: Services) -> str:
    public = services.settings.public_url
    if public is None:
        raise Conflict("connecting an OAuth backend needs MCP_BATCH_PUBLIC_URL (the redirect URI is built from it)")
    return public.rstrip("/") + CALLBACK_PATH


def _oauth_backend(services: Services, caller: Caller, server: str) -> tuple[HttpBackend, OAuthAuth]:
    backend = services.registry.get(server)
    if backend is None or not caller.may_call(server):  # a server the key may not call is as missing as none
        raise ServerNotFound(server)
    if not isinstance(backend, HttpBackend) or not isinstance(backend.auth, OAuthAuth):
        raise Conflict(f"server {server!r} does not use OAuth: give its credential with PUT /v1/credentials/{server}")
    return backend, backend.auth


def _scope(auth: OAuthAuth, found: Discovery) -> str | None:
    """The servers file's scopes, else what the server says it supports (the SDK's choice, with offline_access
    when the authorization server offers it, for a refresh token)."""
    return get_client_metadata_scopes(" ".join(auth.scopes) or None, found.resource_metadata, found.metadata, _GRANTS)


async def _state_key(services: Services) -> bytes:
    return flow_state.state_key(await cursor_secret(services.redis, services.keys, services.settings.cursor_secret))


async def connect(services: Services, caller: Caller, server: str) -> ConnectStarted:
    """Start connecting the caller's tenant to `server`: the authorization URL its browser opens."""
    require(caller, Right.credentials, "connecting a backend")
    backend, auth = _oauth_backend(services, caller, server)
    return await _started(services, caller.tenant, server, backend, auth)


async def start(services: Services, ticket: str) -> ConnectStarted | CallbackOutcome:
    """The authorization URL for the tenant and server a question's link names (its ticket, signed by a worker
    for an item waiting on this connection), or why the link no longer works."""
    holder = flow_state.ticket_holder(await _state_key(services), ticket)
    if holder is None:
        return CallbackOutcome(False, _REFUSED, "This link is not genuine or has expired: the call no longer waits.")
    tenant, server = holder
    backend = services.registry.get(server)
    if not isinstance(backend, HttpBackend) or not isinstance(backend.auth, OAuthAuth):
        return CallbackOutcome(False, _REFUSED, f"Server {server!r} no longer uses OAuth.")
    return await _started(services, tenant, server, backend, backend.auth)


async def _started(
    services: Services, tenant: str, server: str, backend: HttpBackend, auth: OAuthAuth
) -> ConnectStarted:
    redirect = redirect_uri(services)
    sealer = services.store.credentials.sealer  # refuses at once without a secrets key
    async with httpx2.AsyncClient(timeout=_HTTP_SECONDS) as http:
        found = await discover(http, server, backend.url)
        client = await _client(services, http, server, auth, found, redirect)
    scope = _scope(auth, found)
    pkce = PKCEParameters.generate()
    key = await _state_key(services)
    state, nonce = flow_state.new_state(key)
    record = flow_state.pending(key, nonce, tenant, server, pkce.code_verifier, redirect, client)
    sealed = sealer.seal(flow_state.sealable(record), "", f"oauth-state:{nonce}")
    await services.store.oauth.put(state, sealed, flow_state.STATE_SECONDS)
    url = grants.authorization_url(
        found.metadata,
        client.client_id,
        redirect,
        scope.split() if scope else [],
        found.resource,
        state,
        pkce.code_challenge,
    )
    return ConnectStarted(authorization_url=url, expires_at=iso(record.expires_at) or "")


async def _client(
    services: Services, http: httpx2.AsyncClient, server: str, auth: OAuthAuth, found: Discovery, redirect: str
) -> OAuthClient:
    """How this service identifies itself to the server's authorization server."""
    issuer = str(found.metadata.issuer)
    endpoints = {
        "token_url": str(found.metadata.token_endpoint),
        "revocation_url": str(found.metadata.revocation_endpoint) if found.metadata.revocation_endpoint else None,
        "issuer": issuer,
        "resource": found.resource,
    }
    if auth.client_metadata_url and should_use_client_metadata_url(found.metadata, auth.client_metadata_url):
        return OAuthClient(client_id=auth.client_metadata_url, **endpoints)
    if auth.client_id is not None:
        return OAuthClient(client_id=auth.client_id, client_secret=auth.client_secret, **endpoints)
    sealer = services.store.credentials.sealer
    kept = await services.store.oauth.get_client(server)
    if kept is not None:
        try:
            registered = _Registered.model_validate_json(sealer.open(kept, "", f"oauth-client:{server}"))
        except SealBroken:
            registered = None
        if registered is not None and registered.redirect_uri == redirect and registered.client.issuer == issuer:
            return registered.client.model_copy(update=endpoints)
    if found.metadata.registration_endpoint is None:
        raise OAuthUnavailable(
            server, "its authorization server takes no registration: configure auth.client_id (and client_secret)"
        )
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(redirect)],
        token_endpoint_auth_method="client_secret_post",
        grant_types=_GRANTS,
        client_name="mcp-batch",
        application_type="web",
        scope=get_client_metadata_scopes(
            " ".join(auth.scopes) or None, found.resource_metadata, found.metadata, _GRANTS
        ),
    )
    request = create_client_registration_request(found.metadata, metadata, issuer)
    try:
        info = await handle_registration_response(await http.send(request))
        check_registration_usable(info)
    except OAuthRegistrationError:
        raise OAuthUnavailable(server, "its authorization server refused to register this service") from None
    secret = SecretStr(info.client_secret) if info.client_secret else None
    client = OAuthClient(client_id=info.client_id, client_secret=secret, **endpoints)
    registered = _Registered(redirect_uri=redirect, client=client)
    await services.store.oauth.put_client(
        server, sealer.seal(flow_state.sealable(registered), "", f"oauth-client:{server}")
    )
    return client


async def callback(services: Services, code: str | None, state: str | None, error: str | None) -> CallbackOutcome:
    """Finish a connect flow the authorization server sent the browser back from."""
    if not state:
        return CallbackOutcome(False, _REFUSED, "The link has no state: start connecting again from the service.")
    key = await _state_key(services)
    nonce = flow_state.issued(key, state)
    if nonce is None:
        return CallbackOutcome(False, _REFUSED, "This link was not issued by this service: start connecting again.")
    sealed = await services.store.oauth.take(state)
    if sealed is None:
        return CallbackOutcome(
            False, _REFUSED, "This link was already used or has expired: start connecting again from the service."
        )
    try:
        raw = services.store.credentials.sealer.open(sealed, "", f"oauth-state:{nonce}")
        record = flow_state.PendingConnect.model_validate_json(raw)
    except (SealBroken, ValueError):
        return CallbackOutcome(False, _REFUSED, "This link's record does not open: start connecting again.")
    if not flow_state.genuine(key, nonce, record):
        return CallbackOutcome(False, _REFUSED, "This link was not made for the tenant and server it names.")
    if record.expires_at <= time.time():
        return CallbackOutcome(False, _REFUSED, "This link has expired: start connecting again from the service.")
    if error is not None:
        said = error if error.replace("_", "").isalnum() else "an error"
        return CallbackOutcome(False, _REFUSED, f"The authorization server answered {said}: nothing was connected.")
    if not code:
        return CallbackOutcome(False, _REFUSED, "The authorization server sent no code: nothing was connected.")
    if not record.verifier.get_secret_value():
        return CallbackOutcome(False, _REFUSED, "This flow has no PKCE verifier: start connecting again.")
    async with httpx2.AsyncClient(timeout=_HTTP_SECONDS) as http:
        try:
            credential = await grants.redeem_code(
                http, record.server, record.client, SecretStr(code), record.verifier, record.redirect_uri
            )
        except (OAuthGrantRefused, OAuthUnavailable) as exc:
            return CallbackOutcome(False, _REFUSED, f"{exc}. Nothing was connected: start connecting again.")
    await services.store.credentials.put(record.tenant, record.server, credential)
    return CallbackOutcome(
        True,
        "Connected",
        f"Server {record.server!r} is connected: your batches' calls to it now go out as you.",
        record.server,
    )
