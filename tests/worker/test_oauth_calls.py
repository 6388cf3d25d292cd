"""Calls to an OAuth-protected backend go out as their tenant: two tenants connected with different accounts reach
the backend each as its own (its `whoami`), over REST, the MCP door and the Gumloop route, also on a worker where
the other tenant's session is warm; a short-lived token is refreshed mid-batch over two worker processes without a
call failing, once per expiry; a grant revoked mid-batch ends the rest `unauthenticated` with the connect route."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import redis.asyncio as aioredis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_batch.settings import Settings
from tests.oauth_flow import ALPHA, BETA, OAuthBackend, as_, connect, oauth_backend, oauth_settings, stored
from tests.support import (
    ServiceHandle,
    all_results,
    finished,
    run_batch,
    running_api,
    running_service,
    submit,
    until_succeeded,
    worker_processes,
)

pytestmark = pytest.mark.timeout(180)

CONNECT = "POST /v1/credentials/guarded/connect"


def whoami(n: int, seconds: float = 0.0) -> list[dict[str, Any]]:
    return [{"server": "guarded", "tool": "whoami", "arguments": {"seconds": seconds}} for _ in range(n)]


def subjects(items: list[dict[str, Any]]) -> list[str]:
    return [item["content"][0]["text"] if item["status"] == "ok" else item["status"] for item in items]


@pytest.fixture(scope="module")
def guarded() -> Iterator[OAuthBackend]:
    with oauth_backend() as backend:
        yield backend


@pytest.fixture
def oauth(settings: Settings, tmp_path: Path, guarded: OAuthBackend) -> Settings:
    return oauth_settings(settings, tmp_path, {"guarded": {"url": guarded.url, "auth": {"type": "oauth"}}})


@pytest.fixture
async def service(oauth: Settings) -> AsyncIterator[ServiceHandle]:
    async with running_service(oauth) as handle:
        async with as_(handle.base_url, ALPHA) as alpha, as_(handle.base_url, BETA) as beta:
            assert (await connect(alpha, handle.base_url, "guarded", "alice")).status_code == 200
            assert (await connect(beta, handle.base_url, "guarded", "bob")).status_code == 200
        yield handle


async def test_each_tenant_reaches_the_backend_as_its_own_account_over_rest(service: ServiceHandle) -> None:
    async with as_(service.base_url, ALPHA) as alpha, as_(service.base_url, BETA) as beta:
        warm = await run_batch(alpha, whoami(5))  # alpha's session is now warm on the one worker
        assert subjects(warm["results"]) == ["alice"] * 5
        theirs = await run_batch(beta, whoami(5))
        assert subjects(theirs["results"]) == ["bob"] * 5
        both = [await submit(alpha, whoami(20, 0.02)), await submit(beta, whoami(20, 0.02))]
        for client, batch in zip((alpha, beta), both, strict=True):
            await finished(client, batch["id"])
        mine, other = [await all_results(client, b["id"]) for client, b in zip((alpha, beta), both, strict=True)]
    assert subjects(mine) == ["alice"] * 20 and subjects(other) == ["bob"] * 20


async def test_each_tenant_reaches_the_backend_as_its_own_account_over_the_gumloop_route(
    service: ServiceHandle,
) -> None:
    call = {"server_id": "guarded", "tool_name": "whoami", "arguments": {}}
    async with as_(service.base_url, ALPHA) as alpha, as_(service.base_url, BETA) as beta:
        for client, account in ((alpha, "alice"), (beta, "bob"), (alpha, "alice")):
            answer = await client.post("/mcp/tools/call", json={"calls": [call, call]})
            assert answer.status_code == 200, answer.text
            assert [r["content"][0]["text"] for r in answer.json()["results"]] == [account, account]


async def test_each_tenant_reaches_the_backend_as_its_own_account_over_the_mcp_door(service: ServiceHandle) -> None:
    calls = [{"server": "guarded", "tool": "whoami", "arguments": {}}] * 2
    for key, account, other in ((ALPHA, "alice", "bob"), (BETA, "bob", "alice")):
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            door = Client(streamable_http_client(f"{service.base_url}/mcp/", http_client=http))
            async with door:
                answer = await door.call_tool("call_tools_batch", {"calls": calls})
        said = json.dumps(answer.model_dump(mode="json"))
        assert said.count(f'"{account}"') >= 2 and f'"{other}"' not in said, said


async def test_a_token_expiring_mid_batch_is_refreshed_once_per_expiry_across_two_workers(
    settings: Settings, tmp_path: Path
) -> None:
    with oauth_backend(["--access-ttl", "3"]) as short:
        oauth = oauth_settings(settings, tmp_path, {"guarded": {"url": short.url, "auth": {"type": "oauth"}}})
        async with running_api(oauth) as base_url, as_(base_url, ALPHA) as alpha:
            assert (await connect(alpha, base_url, "guarded", "alice")).status_code == 200
            with worker_processes(oauth, 2, tmp_path):
                started = time.monotonic()
                document = await run_batch(alpha, whoami(200, 0.1))
                took = time.monotonic() - started
            items = await all_results(alpha, document["id"])
        stats = short.stats()
    assert document["status"] == "completed" and document["counts"]["succeeded"] == 200, document["counts"]
    assert subjects(items) == ["alice"] * 200
    # Each token is refreshed two thirds into its 3 s life: about one refresh per 2 s of the batch, and no refresh
    # token spent twice (the server counts a rotated-away one presented again).
    assert stats["spent_refresh_reused"] == 0 and stats["issued"] == stats["refreshes"] + 1
    assert max(1, int(took / 3)) <= stats["refreshes"] <= took / 2 + 1, (stats["refreshes"], took)


async def test_a_token_the_backend_refuses_before_its_time_is_refreshed_once_and_the_calls_go_on(
    service: ServiceHandle, guarded: OAuthBackend
) -> None:
    async with as_(service.base_url, ALPHA) as alpha:
        assert subjects((await run_batch(alpha, whoami(3)))["results"]) == ["alice"] * 3  # a session with the token
        before = guarded.stats()["refreshes"]
        guarded.drop_access("alice")
        document = await run_batch(alpha, whoami(10))
    assert subjects(document["results"]) == ["alice"] * 10
    assert guarded.stats()["refreshes"] == before + 1


async def test_a_grant_revoked_mid_batch_ends_the_rest_unauthenticated_with_the_connect_route(
    service: ServiceHandle, guarded: OAuthBackend, redis: aioredis.Redis
) -> None:
    async with as_(service.base_url, ALPHA) as alpha:
        batch = await submit(alpha, whoami(60, 0.05))
        await until_succeeded(alpha, batch["id"], 5)
        guarded.revoke_account("alice")
        await finished(alpha, batch["id"])
        items = await all_results(alpha, batch["id"])
    statuses = {item["status"] for item in items}
    assert statuses == {"ok", "unauthenticated"}, statuses
    refused = [item for item in items if item["status"] == "unauthenticated"]
    assert all(item["error"]["code"] == "backend_unauthenticated" for item in refused)
    assert all(item["error"]["details"]["connect"] == CONNECT for item in refused), refused[0]
    credential = await stored(redis).get("alpha", "guarded")
    assert credential is not None and credential.needs_connect
    async with as_(service.base_url, BETA) as beta:  # bob's grant is untouched
        assert subjects((await run_batch(beta, whoami(3)))["results"]) == ["bob"] * 3


async def test_a_client_credentials_backend_is_called_as_the_service_for_every_tenant(
    settings: Settings, tmp_path: Path
) -> None:
    with oauth_backend(["--client", "svc:svc-secret:https://unused.example/cb"]) as machine:
        auth = {
            "type": "oauth_client_credentials",
            "token_url": f"{machine.issuer}/token",
            "client_id": "svc",
            "client_secret": "svc-secret",
            "audience": machine.url,
        }
        oauth = oauth_settings(settings, tmp_path, {"guarded": {"url": machine.url, "auth": auth}})
        async with running_service(oauth) as handle:
            for key in (ALPHA, BETA):
                async with as_(handle.base_url, key) as client:
                    document = await run_batch(client, whoami(3))
                assert subjects(document["results"]) == ["client:svc"] * 3
        assert machine.stats()["machine_tokens"] == 1
