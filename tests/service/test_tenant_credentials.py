"""Calls made as the tenant: each tenant's own secret reaches an HTTP backend (its header) and a stdio backend (its
process's env) on sessions of its own, through every door; a tenant without one gets `unauthenticated` and the route
that fixes it, and the call is never sent. Two real tenants (keys), a real worker, real backends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from mcp_batch.credentials.sealing import new_key
from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from service.app import create_app
from tests.support import (
    HttpBackendProcess,
    call_backend,
    eventually,
    finished,
    most_in_window,
    running_service,
    stamps,
    stdio_demo,
    submit,
)

pytestmark = [pytest.mark.timeout(120)]

ACME, BRAVO, CAROL, ACME_READER = "mcpb_acme-key", "mcpb_bravo-key", "mcpb_carol-key", "mcpb_acme-reader"
TOKENS = {ACME: "tok-acme-1", BRAVO: "tok-bravo-1"}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
WHO = [
    {"id": "http", "server": "who_http", "tool": "whoami"},
    {"id": "stdio", "server": "who_stdio", "tool": "whoami"},
]


@pytest.fixture
def servers(servers: dict[str, Any], fresh_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["who_http"] = {"url": fresh_backend.url, "auth": {"type": "tenant"}}
    servers["who_stdio"] = stdio_demo(auth={"type": "tenant", "env": "TENANT_TOKEN"})
    paced = {"per_second": 5, "burst": 1}
    servers["paced"] = {"url": fresh_backend.url, "auth": {"type": "tenant"}, "rate_limit_per_tenant": paced}
    return servers


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    def entry(key: str, tenant: str, **rights: Any) -> dict[str, Any]:
        return {"sha256": hash_key(key), "tenant": tenant, **rights}

    keys = [
        entry(ACME, "acme", credentials=True),
        entry(BRAVO, "bravo", credentials=True),
        entry(CAROL, "carol", credentials=True),
        entry(ACME_READER, "acme"),
    ]
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    sealing = SecretStr(json.dumps([new_key()]))
    return settings.model_copy(update={"auth": "keys", "keys": path, "secrets_keys": sealing})


@pytest.fixture
async def base_url(keyed: Settings) -> Any:
    async with running_service(keyed) as service:
        yield service.base_url


def as_(base_url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def answers(document: dict[str, Any]) -> dict[str, Any]:
    return {
        item["id"]: (item["status"], item.get("content") and item["content"][0]["text"]) for item in document["results"]
    }


async def given(base_url: str, key: str, server: str, secret: str) -> None:
    async with as_(base_url, key) as client:
        response = await client.put(f"/v1/credentials/{server}", json={"secret": secret})
        assert response.status_code == 204, response.text


async def as_tenant(base_url: str, key: str) -> dict[str, Any]:
    async with as_(base_url, key) as client:
        return answers(await finished(client, (await submit(client, WHO))["id"]))


async def test_each_tenant_reaches_the_backends_as_itself_even_after_anothers_session_was_warm(base_url: str) -> None:
    for key, token in TOKENS.items():
        for server in ("who_http", "who_stdio"):
            await given(base_url, key, server, token)
    first = await as_tenant(base_url, ACME)  # acme's sessions are now warm on the one worker
    assert first == {"http": ("ok", "Bearer tok-acme-1"), "stdio": ("ok", "tok-acme-1")}
    second = await as_tenant(base_url, BRAVO)
    assert second == {"http": ("ok", "Bearer tok-bravo-1"), "stdio": ("ok", "tok-bravo-1")}
    assert await as_tenant(base_url, ACME) == first


async def test_the_gumloop_route_and_the_mcp_door_call_as_the_tenant(base_url: str) -> None:
    for key, token in TOKENS.items():
        await given(base_url, key, "who_http", token)
        await given(base_url, key, "who_stdio", token)
    for key, token in TOKENS.items():
        async with as_(base_url, key) as client:
            calls = [
                {"server_id": "who_http", "tool_name": "whoami"},
                {"server_id": "who_stdio", "tool_name": "whoami"},
            ]
            gumloop = (await client.post("/mcp/tools/call", json={"calls": calls})).json()["results"]
            assert [r["content"][0]["text"] for r in gumloop] == [f"Bearer {token}", token]
            rpc = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "call_tools_batch", "arguments": {"calls": WHO, "wait_seconds": 30}},
            }
            answered = await client.post("/mcp", json=rpc, headers=MCP_HEADERS)
            assert answered.status_code == 200, answered.text
            # One SSE event: the batch document, whose items' text is what the backends saw.
            assert f"Bearer {token}" in answered.text
            other = TOKENS[BRAVO if key == ACME else ACME]
            assert other not in answered.text


async def test_a_tenant_without_a_credential_gets_unauthenticated_and_the_route_that_fixes_it(base_url: str) -> None:
    await given(base_url, ACME, "who_http", "tok-acme-1")  # another tenant's credential gives carol nothing
    async with as_(base_url, CAROL) as client:
        dry = (await client.post("/v1/batches:validate", json={"calls": WHO})).json()
        assert dry["valid"] is False
        assert {(c["server"], c["connect"]) for c in dry["connect"]} == {
            ("who_http", "PUT /v1/credentials/who_http"),
            ("who_stdio", "PUT /v1/credentials/who_stdio"),
        }
        document = await finished(client, (await submit(client, WHO))["id"])
        assert document["counts"]["unauthenticated"] == 2 and document["counts"]["failed"] == 2
        for item in document["results"]:
            assert item["status"] == "unauthenticated" and not item.get("attempts")  # never sent
            assert item["error"]["code"] == "backend_unauthenticated"
            assert item["error"]["details"]["connect"] == f"PUT /v1/credentials/{item['server']}"
        gumloop = await client.post(
            "/mcp/tools/call", json={"calls": [{"server_id": "who_http", "tool_name": "whoami"}]}
        )
        (result,) = gumloop.json()["results"]
        assert result["status"] == "unauthenticated" and result["error"]["details"]["connect"]


async def test_a_replaced_secret_is_used_and_a_deleted_one_stops_the_calls(base_url: str) -> None:
    await given(base_url, ACME, "who_http", "tok-acme-1")
    await given(base_url, ACME, "who_stdio", "tok-acme-1")
    assert (await as_tenant(base_url, ACME))["http"] == ("ok", "Bearer tok-acme-1")
    await given(base_url, ACME, "who_http", "tok-acme-2")
    await given(base_url, ACME, "who_stdio", "tok-acme-2")

    async def replaced() -> bool:
        return await as_tenant(base_url, ACME) == {"http": ("ok", "Bearer tok-acme-2"), "stdio": ("ok", "tok-acme-2")}

    await eventually(replaced, what="the replaced secret in use", timeout=30)
    async with as_(base_url, ACME) as client:
        for server in ("who_http", "who_stdio"):
            assert (await client.delete(f"/v1/credentials/{server}")).status_code == 204
        assert (await client.delete("/v1/credentials/who_http")).status_code == 404

    async def stopped() -> bool:
        found = await as_tenant(base_url, ACME)
        return all(status == "unauthenticated" for status, _ in found.values())

    await eventually(stopped, what="calls refused once the secret is deleted", timeout=30)


async def test_the_routes_list_without_values_and_check_rights_and_servers(base_url: str) -> None:
    async with as_(base_url, ACME) as client:
        assert (await client.get("/v1/credentials")).json() == []
        assert (await client.put("/v1/credentials/who_http", json={"secret": "tok-list-1"})).status_code == 204
        listed = await client.get("/v1/credentials")
        (held,) = listed.json()
        assert held["server"] == "who_http" and held["kind"] == "secret" and held["set_at"]
        assert "tok-list-1" not in listed.text
        assert (await client.put("/v1/credentials/nowhere", json={"secret": "x"})).status_code == 404
        assert (await client.put("/v1/credentials/demo_http", json={"secret": "x"})).status_code == 409
        for bad in ({"secret": ""}, {"secret": "tok\nlist"}, {"secret": "x", "other": 1}, {}):
            refused = await client.put("/v1/credentials/who_http", json=bad)
            assert refused.status_code == 422 and "tok\\nlist" not in refused.text and "tok\nlist" not in refused.text
    async with as_(base_url, ACME_READER) as reader:
        assert [c["server"] for c in (await reader.get("/v1/credentials")).json()] == ["who_http"]
        refused = await reader.put("/v1/credentials/who_http", json={"secret": "tok-reader"})
        assert refused.status_code == 403 and "credentials" in refused.text
        assert (await reader.delete("/v1/credentials/who_http")).status_code == 403
    async with as_(base_url, BRAVO) as other:
        assert (await other.get("/v1/credentials")).json() == []


async def test_rate_limit_per_tenant_paces_each_tenant_on_its_own(
    base_url: str, fresh_backend: HttpBackendProcess
) -> None:
    async def paced(key: str) -> dict[str, Any]:
        await given(base_url, key, "paced", TOKENS[key])
        async with as_(base_url, key) as client:
            return await finished(client, (await submit(client, stamps("paced", 8), max_concurrency=8))["id"])

    documents = await asyncio.gather(paced(ACME), paced(BRAVO))
    assert all(document["ok"] for document in documents)
    arrivals = (await call_backend(fresh_backend.url, "stats"))["arrivals"]
    # 5/s with a burst of 1 per tenant: 8 calls take 1.4 s each, side by side (one bucket for both would take 3 s)
    assert len(arrivals) == 16 and most_in_window(arrivals, 1.0) <= 13
    assert 7 / 5 * 0.9 <= max(arrivals) - min(arrivals) < 2.6


def test_the_api_refuses_to_start_with_tenant_backends_and_no_secrets_key(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="MCP_BATCH_SECRETS_KEYS"):
        create_app(settings)


async def test_servers_lists_a_tenant_backends_tools_with_the_tenants_own_secret_before_any_call(
    base_url: str,
) -> None:
    await given(base_url, ACME, "who_http", "tok-acme-list")
    await given(base_url, ACME, "who_stdio", "tok-acme-list")
    async with as_(base_url, ACME) as acme, as_(base_url, CAROL) as carol:
        answer = await acme.get("/v1/servers")
        mine = {server["name"]: server for server in answer.json()}
        theirs = {server["name"]: server for server in (await carol.get("/v1/servers")).json()}
    assert "tok-acme-list" not in answer.text
    for name in ("who_http", "who_stdio"):
        assert "whoami" in [tool["name"] for tool in mine[name]["tools"]], mine[name]
        assert theirs[name]["tools"] is None and theirs[name]["connect"] == f"PUT /v1/credentials/{name}"
