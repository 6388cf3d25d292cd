"""GET /v1/servers, /healthz and the OpenAPI document."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


@pytest.fixture
def servers(servers: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("DEMO_SECRET_TOKEN", "tok-1234-do-not-leak")
    servers["demo"]["env"] = {"DEMO_KEY": "${DEMO_SECRET_TOKEN}"}
    servers["demo_http"]["headers"] = {"Authorization": "Bearer ${DEMO_SECRET_TOKEN}"}
    servers["demo_http"]["rate_limit"] = {"per_second": 20, "burst": 5}
    servers["down"] = {"url": "http://127.0.0.1:9/mcp", "timeout_seconds": 2}
    return servers


async def test_servers_lists_backends_tools_and_annotations_but_no_secrets(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/servers")
    assert response.status_code == 200
    assert "tok-1234" not in response.text and "DEMO_KEY" not in response.text
    servers = {s["name"]: s for s in response.json()}
    assert servers["demo"]["transport"] == "stdio" and servers["demo_http"]["transport"] == "http"
    assert servers["demo_http"]["rate_limit"] == {"per_second": 20, "burst": 5}
    tools = {t["name"]: t for t in servers["demo"]["tools"]}
    assert tools["echo"]["annotations"]["readOnlyHint"] is True
    assert tools["write"]["annotations"]["readOnlyHint"] is False
    assert "message" in tools["echo"]["input_schema"]["properties"]
    assert servers["down"]["tools"] is None and "could not list tools" in servers["down"]["tools_error"]


async def test_healthz_reports_redis(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok", "redis": True}


async def test_openapi_describes_every_model(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    models = schema["components"]["schemas"]
    for name in ("BatchRequest", "Call", "BatchDocument", "ItemResult", "ItemError", "Counts", "ServerInfo"):
        assert name in models, name
    assert models["Call"]["properties"]["server"]["description"]
    assert "/v1/batches/{batch_id}" in schema["paths"]
