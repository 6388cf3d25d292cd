"""A backend that takes each tenant's own credential lists its tools as the tenant, with no worker involved: an
OAuth-protected backend (a real authorization server, login and consent over HTTP) refuses a listing without a
token, so a tenant that has connected sees the tools and one that has not sees the route that connects it, on REST,
a dry run and the MCP door; no token ever shows."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import redis.asyncio as aioredis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_batch.settings import Settings
from tests.oauth_flow import ALPHA, BETA, as_, connect, oauth_backend, oauth_settings, stored
from tests.support import running_api

pytestmark = [pytest.mark.timeout(120)]

CONNECT = "POST /v1/credentials/guarded/connect"


@pytest.fixture
async def base_url(settings: Settings, tmp_path: Path) -> AsyncIterator[str]:
    with oauth_backend() as guarded:
        servers = {"guarded": {"url": guarded.url, "auth": {"type": "oauth"}}}
        async with running_api(oauth_settings(settings, tmp_path, servers)) as url:
            yield url


async def listed_on_the_mcp_door(base_url: str, key: str) -> dict[str, object]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        (server,) = (await client.call_tool("list_servers", {})).structured_content["result"]
        return dict(server)


async def test_a_connected_tenant_sees_its_tools_and_another_the_route_that_connects_it(
    base_url: str, redis: aioredis.Redis
) -> None:
    whoami = [{"server": "guarded", "tool": "whoami"}, {"server": "guarded", "tool": "nosuch"}]
    async with as_(base_url, ALPHA) as alpha, as_(base_url, BETA) as beta:
        (before,) = (await alpha.get("/v1/servers")).json()
        assert before["tools"] is None and before["connect"] == CONNECT
        assert "needs connecting" in before["tools_error"]
        page = await connect(alpha, base_url, "guarded", "alice")
        assert page.status_code == 200, page.text
        answer = await alpha.get("/v1/servers")
        (after,) = answer.json()
        assert "whoami" in [tool["name"] for tool in after["tools"]]
        assert after.get("tools_error") is None and after.get("connect") is None
        dry = (await alpha.post("/v1/batches:validate", json={"calls": whoami})).json()
        assert [r["status"] for r in dry["results"]] == ["pending", "unknown_tool"] and dry["connect"] == []
        (theirs,) = (await beta.get("/v1/servers")).json()
        assert theirs["tools"] is None and theirs["connect"] == CONNECT
    door = await listed_on_the_mcp_door(base_url, ALPHA)
    assert "whoami" in [tool["name"] for tool in door["tools"]]  # type: ignore[union-attr]
    assert (await listed_on_the_mcp_door(base_url, BETA))["connect"] == CONNECT
    credential = await stored(redis).get("alpha", "guarded")
    assert credential is not None and credential.access_token is not None
    assert credential.access_token.get_secret_value() not in answer.text + str(door)
