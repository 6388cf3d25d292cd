"""Connecting a tenant to an OAuth-protected backend over HTTP, as its browser would: the connect route, the
authorization server's login and consent pages (tests/oauth_server.py, the MCP SDK's handlers), and the callback,
which refuses a replayed, forged, expired or cross-tenant state and a flow without a PKCE verifier."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.credentials import flow_state
from mcp_batch.credentials.record import CredentialKind, OAuthClient
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.cursor_secret import cursor_secret
from mcp_batch.store.oauth import OAuthStates
from tests.oauth_flow import (
    ALPHA,
    BETA,
    PUBLIC_URL,
    READER,
    OAuthBackend,
    as_,
    authorize,
    connect,
    follow_to_service,
    oauth_backend,
    oauth_settings,
    stored,
)
from tests.support import eventually, running_api


@pytest.fixture(scope="module")
def guarded() -> Iterator[OAuthBackend]:
    with oauth_backend() as backend:
        yield backend


@pytest.fixture
async def base_url(settings: Settings, tmp_path: Path, guarded: OAuthBackend) -> AsyncIterator[str]:
    servers = {"guarded": {"url": guarded.url, "auth": {"type": "oauth"}}}
    async with running_api(oauth_settings(settings, tmp_path, servers)) as url:
        yield url


async def test_a_tenant_connects_through_its_browser_and_gets_its_own_tokens(
    base_url: str, guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    before = guarded.stats()
    async with as_(base_url, ALPHA) as alpha:
        started = await alpha.post("/v1/credentials/guarded/connect")
        assert started.status_code == 200, started.text
        url = started.json()["authorization_url"]
        asked = parse_qs(urlparse(url).query)
        assert asked["code_challenge_method"] == ["S256"] and asked["resource"] == [guarded.url]
        assert asked["redirect_uri"] == [f"{PUBLIC_URL}/v1/oauth/callback"]
        page = await follow_to_service(base_url, await authorize(url, "alice"))
    assert page.status_code == 200 and "Connected" in page.text, page.text
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    credential = await stored(redis).get("alpha", "guarded")
    assert credential is not None and credential.kind is CredentialKind.oauth
    assert credential.access_token is not None and guarded.active(credential.access_token.get_secret_value())
    assert credential.refresh_token is not None and credential.expires_at is not None
    stats = guarded.stats()
    # no pre-registered client, no metadata document: registered dynamically
    assert stats["registrations"] == before["registrations"] + 1
    new = {name: stats[name][len(before[name]) :] for name in ("authorize_resources", "token_resources")}
    assert new == {"authorize_resources": [guarded.url], "token_resources": [guarded.url]}  # RFC 8707, both requests
    assert await stored(redis).get("beta", "guarded") is None


async def test_a_second_tenant_reuses_the_registered_client(base_url: str, guarded: OAuthBackend) -> None:
    before = guarded.stats()["registrations"]
    async with as_(base_url, ALPHA) as alpha, as_(base_url, BETA) as beta:
        assert (await connect(alpha, base_url, "guarded", "alice")).status_code == 200
        assert (await connect(beta, base_url, "guarded", "bob")).status_code == 200
    assert guarded.stats()["registrations"] == before + 1


async def test_the_callback_refuses_a_replayed_state(base_url: str, redis: aioredis.Redis) -> None:
    async with as_(base_url, ALPHA) as alpha:
        started = await alpha.post("/v1/credentials/guarded/connect")
        back = await authorize(started.json()["authorization_url"], "alice")
    assert (await follow_to_service(base_url, back)).status_code == 200
    await stored(redis).delete("alpha", "guarded")
    again = await follow_to_service(base_url, back)
    assert again.status_code == 403 and "already used or has expired" in again.text
    assert await stored(redis).get("alpha", "guarded") is None


async def test_the_callback_refuses_a_state_it_did_not_issue(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        forged = await browser.get("/v1/oauth/callback", params={"code": "code_x", "state": "made.up"})
        missing = await browser.get("/v1/oauth/callback", params={"code": "code_x"})
    assert forged.status_code == 403 and "not issued by this service" in forged.text
    assert missing.status_code == 403 and "no state" in missing.text


async def test_the_callback_refuses_another_tenants_state(base_url: str, redis: aioredis.Redis) -> None:
    async with as_(base_url, ALPHA) as alpha, as_(base_url, BETA) as beta:
        alphas = await authorize(
            (await alpha.post("/v1/credentials/guarded/connect")).json()["authorization_url"], "alice"
        )
        betas = (await beta.post("/v1/credentials/guarded/connect")).json()["authorization_url"]
    # alice's code, sent back with the state of beta's flow: the code is bound to alpha's PKCE challenge
    code = parse_qs(urlparse(alphas).query)["code"][0]
    state = parse_qs(urlparse(betas).query)["state"][0]
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        crossed = await browser.get("/v1/oauth/callback", params={"code": code, "state": state})
    assert crossed.status_code == 403 and "refused by its authorization server (invalid_grant)" in crossed.text
    assert await stored(redis).get("beta", "guarded") is None
    assert await stored(redis).get("alpha", "guarded") is None


async def test_the_callback_refuses_a_state_past_its_time(
    base_url: str, redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow_state, "STATE_SECONDS", 1)  # the API runs in this process
    async with as_(base_url, ALPHA) as alpha:
        started = await alpha.post("/v1/credentials/guarded/connect")
        back = await authorize(started.json()["authorization_url"], "alice")
    state = parse_qs(urlparse(back).query)["state"][0]

    async def gone() -> bool:
        return not await redis.exists(Keys().oauth_state(state))

    await eventually(gone, what="the state's record expired", timeout=10)
    late = await follow_to_service(base_url, back)
    assert late.status_code == 403 and "already used or has expired" in late.text


async def test_the_callback_refuses_a_flow_without_a_pkce_verifier(base_url: str, redis: aioredis.Redis) -> None:
    key = flow_state.state_key(await cursor_secret(redis, Keys(), None))
    state, nonce = flow_state.new_state(key)
    client = OAuthClient(token_url="http://127.0.0.1:9/token", client_id="c")
    record = flow_state.pending(key, nonce, "alpha", "guarded", "", f"{PUBLIC_URL}/v1/oauth/callback", client)
    sealer = stored(redis).sealer
    await OAuthStates(redis, Keys()).put(
        state, sealer.seal(flow_state.sealable(record), "", f"oauth-state:{nonce}"), 60
    )
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        page = await browser.get("/v1/oauth/callback", params={"code": "code_x", "state": state})
    assert page.status_code == 403 and "no PKCE verifier" in page.text


async def test_a_denied_consent_connects_nothing(base_url: str, redis: aioredis.Redis) -> None:
    async with as_(base_url, ALPHA) as alpha:
        started = await alpha.post("/v1/credentials/guarded/connect")
        back = await authorize(started.json()["authorization_url"], "alice", approve=False)
    page = await follow_to_service(base_url, back)
    assert page.status_code == 403 and "access_denied" in page.text
    assert await stored(redis).get("alpha", "guarded") is None


async def test_connecting_needs_the_credentials_right_and_an_oauth_server(base_url: str) -> None:
    async with as_(base_url, READER) as reader, as_(base_url, ALPHA) as alpha:
        refused = await reader.post("/v1/credentials/guarded/connect")
        unknown = await alpha.post("/v1/credentials/nowhere/connect")
    assert refused.status_code == 403 and "'credentials' right" in refused.text
    assert unknown.status_code == 404 and "nowhere" in unknown.text


@pytest.mark.parametrize("how", ["pre-registered", "metadata document"])
async def test_a_configured_client_is_used_instead_of_registering(settings: Settings, tmp_path: Path, how: str) -> None:
    callback = f"{PUBLIC_URL}/v1/oauth/callback"
    document = f"{PUBLIC_URL}/oauth/client.json"
    if how == "pre-registered":
        as_args, auth = ["--client", f"svc:svc-secret:{callback}"], {"client_id": "svc", "client_secret": "svc-secret"}
    else:
        as_args, auth = ["--cimd", callback], {"client_metadata_url": document}
    with oauth_backend(as_args) as backend:
        servers = {"guarded": {"url": backend.url, "auth": {"type": "oauth", **auth}}}
        async with running_api(oauth_settings(settings, tmp_path, servers)) as url, as_(url, ALPHA) as alpha:
            assert (await connect(alpha, url, "guarded", "alice")).status_code == 200
        stats = backend.stats()
    assert stats["registrations"] == 0
    assert stats["clients"] == ["svc" if how == "pre-registered" else document]


async def test_an_oauth_credential_is_listed_without_its_tokens_and_deleting_it_revokes_the_grant(
    base_url: str, guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    async with as_(base_url, ALPHA) as alpha:
        assert (await connect(alpha, base_url, "guarded", "alice")).status_code == 200
        credential = await stored(redis).get("alpha", "guarded")
        assert credential is not None and credential.access_token is not None and credential.refresh_token is not None
        listed = (await alpha.get("/v1/credentials")).json()
        assert [(c["server"], c["kind"], c["scopes"]) for c in listed] == [
            ("guarded", "oauth", ["mcp", "offline_access"])
        ]
        assert listed[0]["expires_at"] and credential.access_token.get_secret_value() not in json.dumps(listed)
        before = guarded.stats()["revocations"]
        assert (await alpha.delete("/v1/credentials/guarded")).status_code == 204
    assert guarded.stats()["revocations"] == before + 1
    assert not guarded.active(credential.access_token.get_secret_value())
    assert await stored(redis).get("alpha", "guarded") is None
