"""Signing in with an OAuth access token from a real authorization server (oidc-provider), side by side with API
keys, on every door: REST, the event stream, the Gumloop route, the MCP door and /metrics. Tokens that must not pass
are refused with the challenge that points to the resource metadata; a token without the scope a route needs gets
403 `insufficient_scope` naming it; tenants stay apart whichever way their callers signed in."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.oidc_provider import KEY_A, OidcProvider, new_key, signed_in_settings
from tests.ports import free_port
from tests.service.doors.mcp.wire import call_tool
from tests.support import eventually, finished, running_service

pytestmark = pytest.mark.timeout(120)

ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}
GUMLOOP = {"calls": [{"server_id": "demo_http", "tool_name": "echo", "arguments": {"message": "x"}}]}


@dataclass
class Served:
    base_url: str
    provider: OidcProvider

    def client(self, credential: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=60)

    def token(self, client_id: str, scope: str = "read write", resource: str | None = None) -> str:
        return self.provider.token(client_id, resource or self.base_url, scope)


@pytest.fixture
async def served(settings: Settings, oidc: OidcProvider, tmp_path: Path) -> AsyncIterator[Served]:
    port = free_port()
    async with running_service(signed_in_settings(settings, oidc, tmp_path, port), port) as service:
        yield Served(service.base_url, oidc)


async def door_statuses(http: httpx.AsyncClient, batch_id: str) -> dict[str, int]:
    """The status each door answers this client with (the event stream's read only as far as its status)."""
    statuses = {
        "rest": (await http.get("/v1/batches")).status_code,
        "gumloop": (await http.post("/mcp/tools/call", json=GUMLOOP)).status_code,
        "mcp": (await call_tool(http, "list_servers", {}, tasks=False)).status,
        "metrics": (await http.get("/metrics")).status_code,
    }
    async with http.stream("GET", f"/v1/batches/{batch_id}/events") as stream:
        statuses["events"] = stream.status_code
    return statuses


async def test_every_door_serves_a_token_from_the_provider(served: Served) -> None:
    async with served.client(served.token("machine-a", "read write admin")) as http:
        batch = await http.post("/v1/batches", json={"calls": [ECHO]})
        assert batch.status_code == 202, batch.text
        await finished(http, batch.json()["id"])
        assert await door_statuses(http, batch.json()["id"]) == dict.fromkeys(
            ("rest", "gumloop", "mcp", "metrics", "events"), 200
        )


async def test_an_api_key_still_serves_beside_tokens(served: Served) -> None:
    async with served.client(KEY_A) as http:
        assert (await http.post("/v1/batches", json={"calls": [ECHO]})).status_code == 202
        assert (await http.get("/v1/batches")).status_code == 200


def _alg_none(provider: OidcProvider, resource: str) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"iss": provider.issuer, "aud": resource, "iat": now, "exp": now + 300, "scope": "read", "tenant": "a"}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


BAD_TOKENS: dict[str, Callable[[Served], str]] = {
    "for another audience": lambda s: s.token("machine-a", resource="https://elsewhere.example"),
    "expired": lambda s: s.provider.sign({"aud": s.base_url, "exp": int(time.time()) - 120}),
    "signed by another key": lambda s: s.provider.sign({"aud": s.base_url}, key=new_key(s.provider.key.kid)),
    "with alg none": lambda s: _alg_none(s.provider, s.base_url),
    "from an issuer not configured": lambda s: s.provider.sign({"aud": s.base_url, "iss": "https://idp.example"}),
    "without the tenant claim": lambda s: s.token("tenantless"),
    "not a token at all": lambda s: "mcpb_no-such-key",
}


@pytest.mark.parametrize("kind", BAD_TOKENS)
async def test_a_token_that_must_not_pass_is_refused_on_every_door_with_the_challenge(
    served: Served, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = BAD_TOKENS[kind](served)
    async with served.client(KEY_A) as owner:
        batch_id = (await owner.post("/v1/batches", json={"calls": [ECHO]})).json()["id"]
    async with served.client(token) as http:
        assert await door_statuses(http, batch_id) == dict.fromkeys(
            ("rest", "gumloop", "mcp", "metrics", "events"), 401
        )
        refused = await http.get("/v1/batches")
        mcp = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    metadata = f"{served.base_url}/.well-known/oauth-protected-resource"
    challenge = 'Bearer error="invalid_token", resource_metadata="{}", scope="read"'
    assert refused.headers["WWW-Authenticate"] == challenge.format(metadata)
    assert mcp.headers["WWW-Authenticate"] == challenge.format(f"{metadata}/mcp")
    assert token not in refused.text + mcp.text and token not in caplog.text


async def test_a_request_without_credentials_is_pointed_to_the_metadata(served: Served) -> None:
    async with served.client(None) as http:
        refused = await http.post("/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        rest = await http.get("/v1/batches")
    metadata = f"{served.base_url}/.well-known/oauth-protected-resource"
    assert refused.status_code == 401 and refused.json()["error"]["code"] == -32001
    assert refused.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata}/mcp", scope="read"'
    assert rest.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata}", scope="read"'
    assert rest.status_code == 401
    assert "API key or an access token" in rest.json()["detail"]


async def test_a_token_whose_scopes_grant_no_right_gets_403_insufficient_scope_on_every_door(served: Served) -> None:
    async with served.client(KEY_A) as owner:
        batch_id = (await owner.post("/v1/batches", json={"calls": [ECHO]})).json()["id"]
    async with served.client(served.token("nobody-a", "profile")) as http:
        assert await door_statuses(http, batch_id) == dict.fromkeys(
            ("rest", "gumloop", "mcp", "metrics", "events"), 403
        )
        refused = await http.get("/v1/batches")
    assert 'error="insufficient_scope"' in refused.headers["WWW-Authenticate"]
    assert 'scope="read"' in refused.headers["WWW-Authenticate"]


async def test_a_token_without_admin_may_not_scrape_metrics_and_is_told_the_scope(served: Served) -> None:
    async with served.client(served.token("machine-a", "read write")) as http:
        refused = await http.get("/metrics")
    assert refused.status_code == 403 and 'scope="admin"' in refused.headers["WWW-Authenticate"]


async def test_a_read_only_token_running_a_write_batch_is_told_the_write_scope(served: Served) -> None:
    async with served.client(served.token("reader-a", "read")) as http:
        refused = await http.post("/v1/batches", json={"calls": [ECHO], "read_only": False})
        assert (await http.post("/v1/batches", json={"calls": [ECHO]})).status_code == 202
    assert refused.status_code == 403
    assert 'error="insufficient_scope"' in refused.headers["WWW-Authenticate"]
    assert 'scope="write"' in refused.headers["WWW-Authenticate"]


async def test_an_opaque_token_is_checked_by_introspection(served: Served) -> None:
    token = served.token("opaque-a")
    assert token.count(".") == 0  # not a JWT
    async with served.client(token) as http:
        assert (await http.post("/v1/batches", json={"calls": [ECHO]})).status_code == 202
        assert (await http.get("/v1/batches")).status_code == 200  # from the cache, until the token expires
    async with served.client(token + "x") as http:
        assert (await http.get("/v1/batches")).status_code == 401


async def test_a_tenant_b_token_never_sees_tenant_a_batches_on_any_door(served: Served) -> None:
    async with served.client(served.token("machine-a")) as a:
        batch_id = (await a.post("/v1/batches", json={"calls": [ECHO]})).json()["id"]
        await finished(a, batch_id)
    async with served.client(served.token("machine-b")) as b:
        assert (await b.get(f"/v1/batches/{batch_id}")).status_code == 404
        assert (await b.get("/v1/batches")).json()["batches"] == []
        async with b.stream("GET", f"/v1/batches/{batch_id}/events") as stream:
            assert stream.status_code == 404
        theirs = await call_tool(b, "get_batch", {"batch_id": batch_id}, tasks=False)
        assert theirs.result["isError"] and "no batch" in theirs.result["content"][0]["text"]
        assert (await b.post("/mcp/tools/call", json=GUMLOOP | {"team_id": "a"})).status_code == 403
    async with served.client(KEY_A) as key_a:  # the same tenant by key sees it
        assert (await key_a.get(f"/v1/batches/{batch_id}")).status_code == 200


async def test_the_tenants_section_bounds_a_tokens_servers_and_rights(
    settings: Settings, oidc: OidcProvider, tmp_path: Path
) -> None:
    port = free_port()
    bounded = signed_in_settings(settings, oidc, tmp_path, port, a={"servers": ["demo"], "rights": ["read"]})
    async with (
        running_service(bounded, port) as service,
        Served(service.base_url, oidc).client(oidc.token("machine-a", service.base_url)) as http,
    ):
        refused = await http.post("/v1/batches", json={"calls": [ECHO]})
        assert refused.status_code == 403 and "demo_http" in refused.text
        write = await http.post("/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}], "read_only": False})
        assert write.status_code == 403
        assert (await http.post("/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}]})).status_code == 202


async def test_a_key_rotation_at_the_provider_is_taken_without_a_restart(settings: Settings, tmp_path: Path) -> None:
    provider = OidcProvider(tmp_path).start()
    try:
        port = free_port()
        signed = signed_in_settings(settings, provider, tmp_path, port)
        issuer = signed.oauth_issuers[0].model_copy(update={"keys_refresh_seconds": 1.0})
        quick = signed.model_copy(update={"oauth_issuers": [issuer]})
        async with running_service(quick, port) as service:
            served = Served(service.base_url, provider)
            before = served.token("machine-a")
            retired = provider.key
            async with served.client(before) as http:
                assert (await http.get("/v1/batches")).status_code == 200
            provider.rotate()
            async with served.client(served.token("machine-a")) as http:

                async def served_again() -> bool:  # once the keys may be fetched again (a second after the last)
                    return (await http.get("/v1/batches")).status_code == 200

                await eventually(served_again, what="a token signed by the new key served", timeout=10)
            async with served.client(before) as http:  # checked before: honoured until it expires, as JWTs are
                assert (await http.get("/v1/batches")).status_code == 200
            async with served.client(provider.sign({"aud": service.base_url}, key=retired)) as http:
                assert (await http.get("/v1/batches")).status_code == 401  # a new one by the retired key is not
    finally:
        provider.stop()


async def test_the_protected_resource_metadata_names_the_resource_and_its_issuer(served: Served) -> None:
    async with served.client(None) as http:
        service = (await http.get("/.well-known/oauth-protected-resource")).json()
        mcp = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert service["resource"] == served.base_url and mcp["resource"] == f"{served.base_url}/mcp"
    assert service["authorization_servers"] == mcp["authorization_servers"] == [served.provider.issuer]
    assert service["scopes_supported"] == ["read", "write", "credentials", "admin"]
    assert service["bearer_methods_supported"] == ["header"]
