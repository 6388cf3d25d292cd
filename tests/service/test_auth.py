"""API keys and tenants through the real API and worker: 401 without a key, 403 for what a key may not do, 404 for
another tenant's batch on every route, the key's own ceilings, listing one's own batches, the MCP door, the keys
file and `mcp-batch keys new`."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import redis.asyncio as aioredis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from mcp_batch_cli.commands import main
from service.app import create_app
from tests.support import (
    HttpBackendProcess,
    call_backend,
    eventually,
    finished,
    not_stored,
    running_service,
    until_succeeded,
)

ALPHA, BETA, READER, TINY = "mcpb_alpha-key", "mcpb_beta-key", "mcpb_reader-key", "mcpb_tiny-key"
SMALL = "mcpb_small-store-key"
ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}


def entry(key: str, tenant: str, **rights: Any) -> dict[str, Any]:
    return {"sha256": hash_key(key), "tenant": tenant, **rights}


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    keys = [
        entry(ALPHA, "alpha", write=True),
        entry(BETA, "beta", write=True),
        entry(READER, "alpha", servers=["demo_http"], name="reader"),
        entry(TINY, "tiny", max_calls_per_batch=2, max_unfinished_items=3),
        entry(SMALL, "small", max_stored_bytes=3_000),
    ]
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return settings.model_copy(update={"auth": "keys", "keys": path})


@pytest.fixture
async def base_url(keyed: Settings) -> AsyncIterator[str]:
    async with running_service(keyed) as service:
        yield service.base_url


def as_(base_url: str, key: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60)


async def test_every_door_needs_a_valid_key(base_url: str) -> None:
    for key in (None, "mcpb_not-a-key"):
        async with as_(base_url, key) as anonymous:
            for method, path in [
                ("POST", "/v1/batches"),
                ("GET", "/v1/batches"),
                ("GET", "/v1/batches/x"),
                ("GET", "/v1/servers"),
                ("POST", "/v1/batches:validate"),
                ("POST", "/mcp/tools/call"),
                ("POST", "/mcp"),
            ]:
                response = await anonymous.request(method, path, json={"calls": [ECHO]})
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["WWW-Authenticate"] == "Bearer"
            assert (await anonymous.get("/healthz")).status_code == 200


async def test_another_tenants_batch_is_404_on_every_route(base_url: str) -> None:
    async with as_(base_url, ALPHA) as alpha, as_(base_url, BETA) as beta:
        response = await alpha.post("/v1/batches", json={"calls": [ECHO]})
        assert response.status_code == 202
        batch_id = response.json()["id"]
        await finished(alpha, batch_id)
        for method, path in [
            ("GET", f"/v1/batches/{batch_id}"),
            ("GET", f"/v1/batches/{batch_id}/items/0"),
            ("GET", f"/v1/batches/{batch_id}/results"),
            ("GET", f"/v1/batches/{batch_id}/events"),
            ("POST", f"/v1/batches/{batch_id}/cancel"),
            ("POST", f"/v1/batches/{batch_id}/retry"),
            ("DELETE", f"/v1/batches/{batch_id}"),
        ]:
            theirs = await beta.request(method, path)
            missing = await beta.request(method, path.replace(batch_id, "0" * 32))
            assert theirs.status_code == missing.status_code == 404, path
            assert theirs.json()["detail"].replace(batch_id, "?") == missing.json()["detail"].replace("0" * 32, "?")
        assert (await alpha.get(f"/v1/batches/{batch_id}")).status_code == 200  # same tenant, another of its keys:
        async with as_(base_url, READER) as reader:
            assert (await reader.get(f"/v1/batches/{batch_id}")).status_code == 200


async def test_a_key_may_only_call_its_servers_and_write_only_with_the_right(
    base_url: str, redis: aioredis.Redis
) -> None:
    async with as_(base_url, READER) as reader:
        calls = [ECHO, {"server": "demo", "tool": "echo"}, {"server": "quick", "tool": "echo"}]
        response = await reader.post("/v1/batches", json={"calls": calls})
        assert response.status_code == 403
        assert [p["loc"] for p in response.json()["detail"]] == [
            ["body", "calls", 1, "server"],
            ["body", "calls", 2, "server"],
        ]
        response = await reader.post("/v1/batches", json={"calls": [ECHO], "read_only": False})
        assert response.status_code == 403 and response.json()["detail"][0]["loc"] == ["body", "read_only"]
        assert await redis.keys("mcpb:batch:*") == []  # refused before anything was stored
        servers = (await reader.get("/v1/servers")).json()
        assert [server["name"] for server in servers] == ["demo_http"]  # it sees only what it may call


async def test_a_key_has_its_own_ceilings(base_url: str) -> None:
    async with as_(base_url, TINY) as tiny:
        response = await tiny.post("/v1/batches", json={"calls": [ECHO] * 3})
        assert response.status_code == 422 and "maximum of 2" in response.text
        slow = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 1}}
        assert (await tiny.post("/v1/batches", json={"calls": [slow, slow]})).status_code == 202
        refused = await tiny.post("/v1/batches", json={"calls": [slow, slow]})
        assert refused.status_code == 429 and "Retry-After" in refused.headers
    async with as_(base_url, ALPHA) as alpha:  # the ceiling is the tiny tenant's alone
        assert (await alpha.post("/v1/batches", json={"calls": [slow, slow]})).status_code == 202


async def test_a_tenants_stored_bytes_have_a_ceiling_released_when_its_batches_expire(
    base_url: str, redis: aioredis.Redis
) -> None:
    call = {"server": "demo_http", "tool": "echo", "arguments": {"message": "m" * 1_000}}  # ~1.1 kB stored
    async with as_(base_url, SMALL) as small:
        kept = (await small.post("/v1/batches", json={"calls": [call, call], "retention_seconds": 1})).json()["id"]
        refused = await small.post("/v1/batches", json={"calls": [call]})
        assert refused.status_code == 429 and "Retry-After" in refused.headers
        assert "stores" in refused.json()["detail"] and "at most 3000" in refused.json()["detail"]
        async with as_(base_url, ALPHA) as alpha:  # the ceiling is the small tenant's alone
            assert (await alpha.post("/v1/batches", json={"calls": [call, call, call]})).status_code == 202
        await finished(small, kept)
        await eventually(lambda: not_stored(redis, kept), what="the kept batch expired on Redis's clock", timeout=10)

        async def accepted() -> str | None:  # its bytes are free once its end's tenant step has run too
            response = await small.post("/v1/batches", json={"calls": [call, call]})
            return response.json()["id"] if response.status_code == 202 else None

        again = await eventually(accepted, what="the expired batch's stored bytes released", timeout=10)
        assert (await small.post("/v1/batches", json={"calls": [call]})).status_code == 429
        await finished(small, again)


async def test_a_tenant_lists_its_own_batches_newest_first(base_url: str) -> None:
    async with as_(base_url, ALPHA) as alpha, as_(base_url, BETA) as beta:
        mine = [(await alpha.post("/v1/batches", json={"calls": [ECHO]})).json()["id"] for _ in range(5)]
        await beta.post("/v1/batches", json={"calls": [ECHO]})
        for batch_id in mine:
            await finished(alpha, batch_id)
        first = (await alpha.get("/v1/batches", params={"limit": 3})).json()
        rest = (await alpha.get("/v1/batches", params={"limit": 3, "cursor": first["next_cursor"]})).json()
        listed = [b["id"] for b in first["batches"] + rest["batches"]]
        assert listed == mine[::-1] and rest["next_cursor"] is None
        assert all(b["status"] == "completed" and b["total"] == 1 for b in first["batches"])
        running = (await alpha.get("/v1/batches", params={"status": "running"})).json()
        assert running["batches"] == []
        assert len((await beta.get("/v1/batches")).json()["batches"]) == 1


async def test_gumloops_team_must_be_the_keys_tenant(base_url: str) -> None:
    body = {"calls": [{"server_id": "demo_http", "tool_name": "echo", "arguments": {"message": "x"}}]}
    async with as_(base_url, ALPHA) as alpha:
        assert (await alpha.post("/mcp/tools/call", json=body | {"team_id": "beta"})).status_code == 403
        assert (await alpha.post("/mcp/tools/call", json=body | {"team_id": "alpha"})).status_code == 200


async def test_the_mcp_door_acts_as_the_keys_tenant(base_url: str) -> None:
    async with as_(base_url, BETA) as beta:
        theirs = (await beta.post("/v1/batches", json={"calls": [ECHO]})).json()["id"]
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {READER}"}) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        listed = await client.call_tool("list_servers", {})
        assert [s["name"] for s in listed.structured_content["result"]] == ["demo_http"]
        refused = await client.call_tool("submit_batch", {"calls": [{"server": "demo", "tool": "echo"}]})
        assert refused.is_error and "calls.0.server" in refused.content[0].text
        missing = await client.call_tool("get_batch", {"batch_id": theirs})
        assert missing.is_error and "no batch" in missing.content[0].text


async def test_a_tenants_rate_share_holds_its_calls_to_that_part_of_the_backend(
    settings: Settings, servers: dict[str, Any], fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    servers["limited"] = {"url": fresh_backend.url, "rate_limit": {"per_second": 40, "burst": 4}}
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": servers}))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [entry(ALPHA, "alpha", rate_share=0.25)]}))
    calls = [{"server": "limited", "tool": "stamp"} for _ in range(21)]
    async with (
        running_service(settings.model_copy(update={"auth": "keys", "keys": keys})) as service,
        as_(service.base_url, ALPHA) as alpha,
    ):
        await finished(alpha, (await alpha.post("/v1/batches", json={"calls": calls})).json()["id"])
    arrivals = sorted((await call_backend(fresh_backend.url, "stats"))["arrivals"])
    # A quarter of 40/s is 10/s with a burst of 1: 21 calls span about 2 s (the whole limit would take 0.4 s).
    assert arrivals[-1] - arrivals[0] >= 1.8


@pytest.mark.serial  # its assertion is a duration
async def test_one_tenants_huge_batch_does_not_starve_anothers(
    settings: Settings, servers: dict[str, Any], fresh_backend: HttpBackendProcess, tmp_path: Path
) -> None:
    servers["shared"] = {"url": fresh_backend.url, "max_concurrency": 4}
    (tmp_path / "servers.json").write_text(json.dumps({"mcpServers": servers}))
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [entry(ALPHA, "alpha"), entry(BETA, "beta")]}))
    stamp = {"server": "shared", "tool": "stamp", "arguments": {"seconds": 0.05}}
    async with (
        running_service(settings.model_copy(update={"auth": "keys", "keys": keys})) as service,
        as_(service.base_url, ALPHA) as alpha,
        as_(service.base_url, BETA) as beta,
    ):
        huge = (await alpha.post("/v1/batches", json={"calls": [stamp] * 400})).json()["id"]
        await until_succeeded(alpha, huge, 20)  # well under way (it takes about 5 s at 4 in flight)
        started = time.monotonic()
        small = await finished(beta, (await beta.post("/v1/batches", json={"calls": [stamp] * 10})).json()["id"])
        took = time.monotonic() - started
        still = (await alpha.get(f"/v1/batches/{huge}", params={"limit": 0})).json()
        await finished(alpha, huge)
    assert small["ok"] and took < 3, took
    assert still["status"] == "running"  # the small one finished while the huge one was still going


def test_a_bad_keys_file_stops_start_up_naming_the_fault(settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    with pytest.raises(ConfigError, match="names no keys file"):
        create_app(settings.model_copy(update={"auth": "keys", "keys": None}))
    path.write_text(json.dumps({"keys": [{"sha256": "not-a-hash", "tenant": "a"}]}))
    with pytest.raises(ConfigError, match=r"keys\.0\.sha256"):
        create_app(settings.model_copy(update={"auth": "keys", "keys": path}))
    path.write_text(json.dumps({"keys": [entry(ALPHA, "a"), entry(ALPHA, "b")]}))
    with pytest.raises(ConfigError, match="twice"):
        create_app(settings.model_copy(update={"auth": "keys", "keys": path}))


def test_keys_new_prints_a_key_once_and_the_line_that_holds_only_its_hash(capsys: pytest.CaptureFixture[str]) -> None:
    main(["keys", "new", "--tenant", "acme", "--servers", "time,docs", "--write", "--rate-share", "0.5"])
    out = capsys.readouterr().out
    key = next(line.split()[-1] for line in out.splitlines() if line.startswith("key:"))
    line = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    assert key.startswith("mcpb_") and key not in json.dumps(line)
    assert line == {
        "sha256": hash_key(key),
        "tenant": "acme",
        "servers": ["time", "docs"],
        "write": True,
        "rate_share": 0.5,
    }
