"""A real MCP client nobody here wrote signs in: the MCP SDK's `OAuthClientProvider` starts from nothing but the
URL of /mcp, discovers the resource metadata and the authorization server from the 401's challenge, registers
itself, runs the authorization-code flow with PKCE (the provider's login and consent pages driven over HTTP as a
browser would) and then `call_tools_batch`; its client-credentials extension does the same for a machine."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from mcp_batch.settings import Settings
from tests.oidc_provider import KEY_A, SECRET, OidcProvider, signed_in_settings
from tests.ports import free_port
from tests.support import running_service

pytestmark = pytest.mark.timeout(120)

ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "signed in"}}


class MemoryStorage:
    """The SDK's `TokenStorage`, for one client's run."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@pytest.fixture
async def base_url(settings: Settings, oidc: OidcProvider, tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    async with running_service(signed_in_settings(settings, oidc, tmp_path, port), port) as service:
        yield service.base_url


async def run_a_batch(url: str, auth: httpx2.Auth) -> str:
    """call_tools_batch through the SDK client signed in by `auth`; the batch's id."""
    async with (
        httpx2.AsyncClient(auth=auth, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool("call_tools_batch", {"calls": [ECHO]})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    batch_id: str = result.structured_content["id"]
    return batch_id


async def tenant_of(base_url: str, batch_id: str) -> str:
    """Whether tenant a's key reads the batch ("a") or not ("other")."""
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {KEY_A}"}) as http:
        return "a" if (await http.get(f"/v1/batches/{batch_id}")).status_code == 200 else "other"


async def test_the_sdk_client_signs_a_user_in_with_pkce_and_runs_a_batch(base_url: str, oidc: OidcProvider) -> None:
    redirected: list[str] = []

    def browse(authorization_url: str) -> str:
        with httpx.Client() as browser:
            return oidc.sign_in(browser, authorization_url, "alice@a")

    async def redirect(authorization_url: str) -> None:
        assert authorization_url.startswith(f"{oidc.issuer}/")  # found from the 401 on /mcp alone
        redirected.append(await asyncio.to_thread(browse, authorization_url))

    async def callback() -> AuthorizationCodeResult:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(redirected[-1]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0], iss=query["iss"][0])

    metadata = OAuthClientMetadata(
        redirect_uris=["http://127.0.0.1/callback"],
        client_name="an MCP client",
        grant_types=["authorization_code"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    storage = MemoryStorage()
    auth = OAuthClientProvider(f"{base_url}/mcp", metadata, storage, redirect, callback)
    batch_id = await run_a_batch(f"{base_url}/mcp", auth)
    assert len(redirected) == 1 and storage.client_info is not None  # registered itself, signed in once
    assert await tenant_of(base_url, batch_id) == "a"


async def test_the_sdk_client_credentials_extension_signs_a_machine_in(base_url: str, oidc: OidcProvider) -> None:
    auth = ClientCredentialsOAuthProvider(
        f"{base_url}/mcp", MemoryStorage(), "machine-b", SECRET, scope="read write", issuer=oidc.issuer
    )
    batch_id = await run_a_batch(f"{base_url}/mcp", auth)
    assert await tenant_of(base_url, batch_id) == "other"  # tenant b's, which a's key cannot read
