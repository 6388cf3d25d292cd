"""A worker's sessions that carry a tenant's credential: one per (backend, tenant), never another tenant's; bounded
(the least recently used idle one closed first); closed when idle; and never opened without a credential. A real
worker, real Redis, real stdio and HTTP backends."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import SecretStr

from mcp_batch.credentials.record import Credential
from mcp_batch.credentials.sealing import new_key
from mcp_batch.errors import BackendUnauthenticated
from mcp_batch.settings import Settings
from tests.support import HttpBackendProcess, eventually, running_worker, stdio_demo
from worker.context import state

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def servers(servers: dict[str, Any], http_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["who_stdio"] = stdio_demo(auth={"type": "tenant", "env": "TENANT_TOKEN"})
    servers["who_http"] = {"url": http_backend.url, "auth": {"type": "tenant"}}
    return servers


def with_key(settings: Settings, **update: Any) -> Settings:
    return settings.model_copy(update={"secrets_keys": SecretStr(json.dumps([new_key()])), **update})


async def test_each_tenant_has_its_own_session_and_the_least_recently_used_is_closed_past_the_bound(
    settings: Settings,
) -> None:
    async with running_worker(with_key(settings, max_tenant_sessions=2)) as worker:
        pool, store = state(worker.ctx).pool, state(worker.ctx).store
        for tenant in ("a", "b", "c"):
            await store.credentials.put(tenant, "who_stdio", Credential.of_secret(SecretStr(f"tok-{tenant}")))
        first = await pool.session("who_stdio", "a")
        second = await pool.session("who_stdio", "b")
        assert first is not second and first.tenant == "a" and second.tenant == "b"
        assert first.presented is not None and first.presented.value == SecretStr("tok-a")
        assert await pool.session("who_stdio", "a") is first  # used again: now b is the least recent
        await pool.session("who_stdio", "c")
        assert len(pool.tenants) == 2
        await eventually(lambda: not second.alive, what="the least recently used session closed")
        assert first.alive and pool.ready("who_stdio", "a") and not pool.ready("who_stdio", "b")


async def test_an_idle_tenant_session_is_closed(settings: Settings) -> None:
    async with running_worker(with_key(settings, tenant_session_idle_seconds=0.2)) as worker:
        pool, store = state(worker.ctx).pool, state(worker.ctx).store
        await store.credentials.put("a", "who_http", Credential.of_secret(SecretStr("tok-a")))
        session = await pool.session("who_http", "a")
        await eventually(lambda: len(pool.tenants) == 0 and not session.alive, what="the idle session closed")


async def test_no_session_opens_without_the_tenants_credential(settings: Settings) -> None:
    async with running_worker(with_key(settings)) as worker:
        pool, store = state(worker.ctx).pool, state(worker.ctx).store
        await store.credentials.put("a", "who_http", Credential.of_secret(SecretStr("tok-a")))
        with pytest.raises(BackendUnauthenticated) as raised:
            await pool.session("who_http", "b")
        assert raised.value.connect == "PUT /v1/credentials/who_http"
        with pytest.raises(BackendUnauthenticated):
            await pool.session("who_http", None)
        assert len(pool.tenants) == 0


async def test_a_worker_refuses_to_start_with_tenant_backends_and_no_secrets_key(settings: Settings) -> None:
    with pytest.raises(Exception, match="MCP_BATCH_SECRETS_KEYS"):
        async with running_worker(settings):
            pass
