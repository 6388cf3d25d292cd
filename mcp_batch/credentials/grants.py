"""The OAuth requests the service makes of an authorization server: the authorization URL (PKCE S256 and the RFC 8707
`resource`), redeeming a code, refreshing, revoking (RFC 7009), and a client-credentials token.

Tokens, codes and verifiers are SecretStr going in and coming out; a refused request says which step and the
server's error code (`invalid_grant`), never its description, which may quote what was sent.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import httpx2
from mcp.shared.auth import OAuthMetadata, OAuthToken
from pydantic import SecretStr, ValidationError

from mcp_batch.backends.servers_file import Backend, ClientCredentialsAuth
from mcp_batch.credentials.record import Credential, CredentialKind, OAuthClient
from mcp_batch.errors import OAuthGrantRefused, OAuthUnavailable

_FORM = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}


def authorization_url(
    metadata: OAuthMetadata,
    client_id: str,
    redirect_uri: str,
    scopes: list[str],
    resource: str,
    state: str,
    challenge: str,
) -> str:
    """Where the tenant's browser goes to log in and consent."""
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": resource,
    }
    if scopes:
        params["scope"] = " ".join(scopes)
    endpoint = str(metadata.authorization_endpoint)
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(params)}"


def _client_auth(client: OAuthClient, form: dict[str, str]) -> dict[str, str]:
    form["client_id"] = client.client_id
    if client.client_secret is not None:
        form["client_secret"] = client.client_secret.get_secret_value()
    return form


async def _token_request(
    http: httpx2.AsyncClient, server: str, url: str, form: dict[str, str], what: str
) -> OAuthToken:
    try:
        response = await http.post(url, data=form, headers=_FORM)
    except httpx2.HTTPError as exc:
        raise OAuthUnavailable(
            server, f"{what}: the token endpoint could not be reached ({type(exc).__name__})"
        ) from None
    if response.status_code in (400, 401):
        code = _error_code(response)
        raise OAuthGrantRefused(f"server {server!r}: {what} was refused by its authorization server ({code})")
    if response.status_code != 200:
        raise OAuthUnavailable(server, f"{what}: the token endpoint answered HTTP {response.status_code}")
    try:
        return OAuthToken.model_validate_json(response.content)
    except ValidationError:
        raise OAuthUnavailable(server, f"{what}: the token endpoint's answer is not a token response") from None


def _error_code(response: httpx2.Response) -> str:
    try:
        body: Any = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    code = body.get("error") if isinstance(body, dict) else None
    return code if isinstance(code, str) and code.replace("_", "").isalnum() else f"HTTP {response.status_code}"


async def redeem_code(
    http: httpx2.AsyncClient, server: str, client: OAuthClient, code: SecretStr, verifier: SecretStr, redirect_uri: str
) -> Credential:
    """The tenant's new credential for the code the authorization server sent back."""
    form = {
        "grant_type": "authorization_code",
        "code": code.get_secret_value(),
        "code_verifier": verifier.get_secret_value(),
        "redirect_uri": redirect_uri,
    }
    if client.resource:
        form["resource"] = client.resource
    token = await _token_request(http, server, client.token_url, _client_auth(client, form), "redeeming the code")
    return _credential(token, client, None)


async def refresh(http: httpx2.AsyncClient, server: str, credential: Credential) -> Credential:
    """The credential with a fresh access token (and the rotated refresh token, when the server rotates them)."""
    if credential.client is None or credential.refresh_token is None:
        raise OAuthGrantRefused(f"server {server!r}: the grant has no refresh token; connect again")
    form = {"grant_type": "refresh_token", "refresh_token": credential.refresh_token.get_secret_value()}
    if credential.client.resource:
        form["resource"] = credential.client.resource
    form = _client_auth(credential.client, form)
    token = await _token_request(http, server, credential.client.token_url, form, "refreshing the access token")
    return _credential(token, credential.client, credential)


async def revoke(http: httpx2.AsyncClient, credential: Credential) -> bool:
    """Revoke the grant at its authorization server (RFC 7009), by its refresh token (else its access token); False
    when the server offers no revocation or did not answer 200."""
    client = credential.client
    token = credential.refresh_token or credential.access_token
    if client is None or client.revocation_url is None or token is None:
        return False
    hint = "refresh_token" if credential.refresh_token is not None else "access_token"
    form = _client_auth(client, {"token": token.get_secret_value(), "token_type_hint": hint})
    try:
        return (await http.post(client.revocation_url, data=form, headers=_FORM)).status_code == 200
    except httpx2.HTTPError:
        return False


async def client_credentials(http: httpx2.AsyncClient, server: str, auth: ClientCredentialsAuth) -> OAuthToken:
    """The service's own token for `server` (the client-credentials grant)."""
    form = {"grant_type": "client_credentials"}
    if auth.scopes:
        form["scope"] = " ".join(auth.scopes)
    if auth.audience:
        form["audience"] = auth.audience
        form["resource"] = auth.audience
    form |= {"client_id": auth.client_id, "client_secret": auth.client_secret.get_secret_value()}
    return await _token_request(http, server, auth.token_url, form, "fetching the service's token")


def _credential(token: OAuthToken, client: OAuthClient, previous: Credential | None) -> Credential:
    kept = previous.refresh_token if previous is not None else None
    refresh_token = SecretStr(token.refresh_token) if token.refresh_token else kept  # an unrotated one stays
    scopes = token.scope.split() if token.scope else (previous.scopes if previous else [])
    now = time.time()
    return Credential(
        kind=CredentialKind.oauth,
        access_token=SecretStr(token.access_token),
        refresh_token=refresh_token,
        expires_at=now + token.expires_in if token.expires_in is not None else None,
        issued_at=now,
        scopes=scopes,
        set_at=previous.set_at if previous else now,
        client=client,
    )


class GrantRevoker:
    """The `Revoker` of credentials/hooks.py: a deleted OAuth grant is revoked at its authorization server."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    async def revoke(self, tenant: str, server: str, backend: Backend, credential: Credential) -> None:
        async with httpx2.AsyncClient(timeout=self.timeout) as http:
            await revoke(http, credential)
