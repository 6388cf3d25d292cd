"""Refreshing tenants' OAuth tokens (worker/token_refresh.py) and the service's own client-credentials token
(worker/machine_tokens.py) against the tests' real authorization server: one refresh however many workers ask at
once, a refused refresh leaving the credential `needs_connect`, and a deleted grant revoked (RFC 7009)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import pytest
import redis.asyncio as aioredis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import SecretStr

from mcp_batch.backends.servers_file import ClientCredentialsAuth, HttpBackend
from mcp_batch.credentials.grants import GrantRevoker
from mcp_batch.credentials.sealing import Sealer
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.oauth import OAuthStates
from tests.conftest import REDIS_URL
from tests.oauth_flow import ALPHA, SECRETS_KEY, OAuthBackend, as_, connect, oauth_backend, oauth_settings, stored
from tests.support import running_api
from worker.machine_tokens import ClientCredentialTokens
from worker.token_refresh import LockedRefresher

CALLBACK = "https://batch.example.test/v1/oauth/callback"


@pytest.fixture(scope="module")
def guarded() -> AsyncIterator[OAuthBackend]:
    with oauth_backend(["--client", f"svc:svc-secret:{CALLBACK}"]) as backend:
        yield backend


@pytest.fixture
async def connected(settings: Settings, tmp_path: Path, guarded: OAuthBackend, redis: aioredis.Redis) -> HttpBackend:
    """Tenant alpha connected to `guarded` as alice; the backend as configured."""
    servers = {"guarded": {"url": guarded.url, "auth": {"type": "oauth"}}}
    async with running_api(oauth_settings(settings, tmp_path, servers)) as base_url, as_(base_url, ALPHA) as alpha:
        assert (await connect(alpha, base_url, "guarded", "alice")).status_code == 200
    return HttpBackend(url=guarded.url, auth={"type": "oauth"})


def refresher(redis: aioredis.Redis) -> LockedRefresher:
    return LockedRefresher(stored(redis), OAuthStates(redis, Keys()), margin=60, timeout=10)


async def test_workers_refreshing_at_once_spend_the_refresh_token_once(
    connected: HttpBackend, guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    read = await stored(redis).get_sealed("alpha", "guarded")
    assert read is not None
    before = guarded.stats()
    credential = stored(redis).open("alpha", "guarded", read)
    workers = [aioredis.Redis.from_url(REDIS_URL) for _ in range(2)]  # each its own connections, as two workers
    try:
        asks = [refresher(workers[n % 2]).refresh("alpha", "guarded", connected, read, credential) for n in range(20)]
        renewed = await asyncio.gather(*asks)
    finally:
        for worker in workers:
            await worker.aclose()
    tokens = {r.access_token.get_secret_value() for r in renewed if r is not None and r.access_token is not None}
    assert len(tokens) == 1 and credential.access_token is not None
    assert tokens != {credential.access_token.get_secret_value()} and guarded.active(tokens.pop())
    after = guarded.stats()
    assert after["refreshes"] - before["refreshes"] == 1
    assert after["spent_refresh_reused"] == before["spent_refresh_reused"]
    again = await stored(redis).get("alpha", "guarded")
    assert again is not None and again.refresh_token != credential.refresh_token  # rotated, and kept


async def test_a_refused_refresh_leaves_the_credential_needing_a_connect(
    connected: HttpBackend, guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    read = await stored(redis).get_sealed("alpha", "guarded")
    assert read is not None
    guarded.revoke_account("alice")
    credential = stored(redis).open("alpha", "guarded", read)
    assert await refresher(redis).refresh("alpha", "guarded", connected, read, credential) is None
    after = await stored(redis).get("alpha", "guarded")
    assert after is not None and after.needs_connect and after.value() is None


async def test_a_deleted_grant_is_revoked_at_its_authorization_server(
    connected: HttpBackend, guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    credential = await stored(redis).delete("alpha", "guarded")
    assert credential is not None and credential.access_token is not None
    assert guarded.active(credential.access_token.get_secret_value())
    before = guarded.stats()["revocations"]
    await GrantRevoker(timeout=10).revoke("alpha", "guarded", connected, credential)
    assert guarded.stats()["revocations"] == before + 1
    assert not guarded.active(credential.access_token.get_secret_value())


async def test_the_services_own_token_is_fetched_once_for_every_worker(
    guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    auth = ClientCredentialsAuth(
        type="oauth_client_credentials",
        token_url=f"{guarded.issuer}/token",
        client_id="svc",
        client_secret=SecretStr("svc-secret"),
        audience=guarded.url,
    )
    backend = HttpBackend(url=guarded.url, auth=auth)
    sealer = Sealer.from_setting(SecretStr(json.dumps([SECRETS_KEY])))
    before = guarded.stats()["machine_tokens"]
    workers = [ClientCredentialTokens(OAuthStates(redis, Keys()), sealer, margin=60, timeout=10) for _ in range(3)]
    tokens = await asyncio.gather(*(w.token("machine", backend) for w in workers for _ in range(3)))
    assert len({t.get_secret_value() for t in tokens}) == 1
    assert guarded.stats()["machine_tokens"] == before + 1
    raw = await redis.get(Keys().oauth_machine("machine"))
    assert raw is not None and tokens[0].get_secret_value().encode() not in raw  # sealed at rest
    headers = {"Authorization": f"Bearer {tokens[0].get_secret_value()}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(guarded.url, http_client=http)) as client,
    ):
        answer = await client.call_tool("whoami", {})
    assert answer.structured_content == {"result": "client:svc"}
    await workers[0].invalidate("machine")
    assert (await workers[0].token("machine", backend)).get_secret_value() != tokens[0].get_secret_value()
    assert guarded.stats()["machine_tokens"] == before + 2


def test_a_wrong_client_secret_gets_no_token(guarded: OAuthBackend) -> None:
    refused = httpx.post(
        f"{guarded.issuer}/token", data={"grant_type": "client_credentials", "client_id": "svc", "client_secret": "x"}
    )
    assert refused.status_code == 401
