"""DNS rebinding: the API serves only the hosts it is configured for and only browser pages of its own origin (or
listed ones), on every route family: REST, the event stream, the Gumloop route, the MCP door and the dashboard.

A page on `http://evil.example` whose name is rebound to 127.0.0.1 reaches the loopback-bound service with
`Host: evil.example` and `Origin: http://evil.example`; both are refused before any route runs, so nothing is
stored. Through the real API (uvicorn on a loopback port) and Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from service.app import host_policy
from tests.support import ServiceHandle, running_api, submit

pytestmark = pytest.mark.timeout(60)

ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}


async def every_family(http: httpx.AsyncClient, batch_id: str, headers: dict[str, str]) -> dict[str, httpx.Response]:
    """One request of each route family, with these headers."""
    gumloop = {"calls": [{"server_id": "demo_http", "tool_name": "echo", "arguments": {"message": "hi"}}]}
    return {
        "rest": await http.post("/v1/batches", json={"calls": [ECHO]}, headers=headers),
        "read": await http.get(f"/v1/batches/{batch_id}", headers=headers),
        "events": await http.get(f"/v1/batches/{batch_id}/events", headers=headers),
        "gumloop": await http.post("/mcp/tools/call", json=gumloop, headers=headers),
        "mcp": await http.post("/mcp", json=INITIALIZE, headers=headers | MCP_ACCEPT),
        "ui": await http.get("/ui/", headers=headers),
        "health": await http.get("/healthz", headers=headers),
    }


async def batch_count(redis: aioredis.Redis) -> int:
    return int(await redis.zcard(Keys().tenant_batches("default")))


async def test_a_foreign_host_is_refused_on_every_route_family_naming_the_setting(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    batch_id = (await submit(client, [ECHO]))["id"]
    before = await batch_count(redis)
    for headers in ({"Host": "evil.example"}, {"Host": "evil.example", "Origin": "http://evil.example"}):
        for family, response in (await every_family(client, batch_id, headers)).items():
            assert response.status_code == 421, (family, response.status_code, response.text)
            assert response.headers["content-type"] == "application/json", family
            assert "MCP_BATCH_ALLOWED_HOSTS" in response.json()["detail"], family
    assert await batch_count(redis) == before  # nothing was stored


async def test_a_foreign_origin_is_refused_with_403_on_every_route_family(
    client: httpx.AsyncClient, service: ServiceHandle, redis: aioredis.Redis
) -> None:
    batch_id = (await submit(client, [ECHO]))["id"]
    before = await batch_count(redis)
    own = service.base_url.removeprefix("http://")
    port = own.rsplit(":", 1)[1]
    for origin in ("http://evil.example", "null", f"http://127.0.0.1.evil.example:{port}", "http://localhost:1"):
        for family, response in (await every_family(client, batch_id, {"Host": own, "Origin": origin})).items():
            assert response.status_code == 403, (family, origin, response.status_code, response.text)
            (problem,) = response.json()["detail"]
            assert problem["loc"] == ["header", "Origin"] and problem["type"] == "origin_not_allowed", family
            assert "MCP_BATCH_ALLOWED_ORIGINS" in problem["msg"], family
    assert await batch_count(redis) == before


async def test_loopback_names_on_any_port_and_the_services_own_origin_are_served(
    client: httpx.AsyncClient, service: ServiceHandle
) -> None:
    port = service.base_url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "[::1]:9999", "LOCALHOST.:80", "127.0.0.1"):
        for origin in (None, f"http://{host}"):
            headers = {"Host": host} | ({"Origin": origin} if origin else {})
            response = await client.post("/v1/batches", json={"calls": [ECHO]}, headers=headers)
            assert response.status_code == 202, (host, origin, response.text)
            mcp = await client.post("/mcp", json=INITIALIZE, headers=headers | MCP_ACCEPT)
            assert mcp.status_code == 200, (host, origin, mcp.text)
    assert (await client.get("/ui/", headers={"Host": f"localhost:{port}"})).status_code == 200


async def test_a_request_without_a_host_header_is_served(service: ServiceHandle) -> None:
    """HTTP/1.0 health checks send none; a browser always does, so no rebinding page can leave it out."""
    host, port = service.base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
        status = await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()
    assert status.startswith(b"HTTP/1.1 200"), status


@pytest.fixture
async def listed(settings: Settings) -> AsyncIterator[str]:
    update: dict[str, Any] = {
        "allowed_hosts": ["batches.example.com", "api.example.net:8443", "*.tenants.example.org"],
        "allowed_origins": ["https://app.example.com", "http://localhost:5173"],
    }
    async with running_api(settings.model_copy(update=update)) as base_url:
        yield base_url


async def test_the_settings_add_the_names_and_origins_a_deployment_serves_under(listed: str) -> None:
    async with httpx.AsyncClient(base_url=listed, timeout=30) as http:

        async def status(host: str, origin: str | None = None) -> int:
            headers = {"Host": host} | ({"Origin": origin} if origin else {})
            return (await http.post("/v1/batches", json={"calls": [ECHO]}, headers=headers)).status_code

        assert await status("batches.example.com") == 202
        assert await status("batches.example.com:443", "https://batches.example.com") == 202  # its own origin
        assert await status("batches.example.com", "https://batches.example.com") == 202
        assert await status("batches.example.com", "https://app.example.com") == 202  # a listed origin
        assert await status("localhost:8000", "http://localhost:5173") == 202
        assert await status("api.example.net:8443") == 202
        assert await status("a.tenants.example.org") == 202
        assert await status("api.example.net") == 421  # the entry names its port
        assert await status("tenants.example.org") == 421  # the wildcard is for names below it
        assert await status("batches.example.com.evil.example") == 421
        assert await status("batches.example.com", "http://batches.example.com:8080") == 403  # another port
        assert await status("batches.example.com", "https://app.example.com:444") == 403


async def test_a_host_check_of_star_serves_every_host(settings: Settings) -> None:
    """For a proxy in front that checks Host itself; Origin is still checked against the Host the request names."""
    async with (
        running_api(settings.model_copy(update={"allowed_hosts": ["*"]})) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=30) as http,
    ):
        served = await http.post("/v1/batches", json={"calls": [ECHO]}, headers={"Host": "anything.example"})
        assert served.status_code == 202
        other = {"Host": "anything.example", "Origin": "http://evil.example"}
        assert (await http.post("/v1/batches", json={"calls": [ECHO]}, headers=other)).status_code == 403


def test_a_malformed_entry_stops_start_up_naming_it(settings: Settings) -> None:
    for field, entry in (
        ("allowed_hosts", "https://batches.example.com"),
        ("allowed_hosts", "batches.example.com/path"),
        ("allowed_hosts", "a:b:c"),
        ("allowed_origins", "app.example.com"),
        ("allowed_origins", "https://app.example.com/path"),
        ("allowed_origins", "ftp://app.example.com"),
    ):
        with pytest.raises(ValueError, match=field):
            Settings.model_validate(settings.model_dump() | {field: [entry]})


def test_the_name_mcp_batch_api_is_started_with_is_served_and_an_address_adds_nothing(settings: Settings) -> None:
    assert host_policy(settings, "box.local").host_allowed("box.local:8000", "10.0.0.2")
    assert host_policy(settings, "0.0.0.0").served_name == "0.0.0.0"  # an address: requests reach it by address
    assert not host_policy(settings, None).host_allowed("box.local:8000", "10.0.0.2")
