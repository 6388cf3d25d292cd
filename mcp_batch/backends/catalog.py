"""Each backend's tools/list, cached in Redis so API and workers can tell an unknown tool without calling it.

A backend that takes each tenant's own credential lists per tenant: what one tenant's credential lists is cached
for that tenant alone, tagged with the hash of the sealed credential it was listed with (`credential_tag`), so a
credential set again (or a refreshed token) is listed anew rather than served the old credential's list.
"""

from __future__ import annotations

import asyncio
import hashlib

from pydantic import BaseModel, TypeAdapter
from redis.asyncio import Redis

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.connect import connect, list_tools
from mcp_batch.backends.presented import Presented
from mcp_batch.backends.servers_file import Registry
from mcp_batch.keys import TENANT_TOOLS_TTL_SECONDS, Keys

_TOOLS = TypeAdapter(list[ToolInfo])


class _TenantTools(BaseModel):
    tag: str
    tools: list[ToolInfo]


def credential_tag(sealed: bytes) -> str:
    """The tag of a tenant's tool list: a hash of the sealed credential (ciphertext, nothing readable)."""
    return hashlib.sha256(sealed).hexdigest()[:32]


class Catalog:
    """Cached tool lists, refreshed after `refresh_seconds`."""

    def __init__(self, redis: Redis, keys: Keys, registry: Registry, refresh_seconds: float, timeout: float) -> None:
        self._redis = redis
        self._keys = keys
        self._registry = registry
        self.refresh_seconds = refresh_seconds
        self._refresh_ms = int(refresh_seconds * 1000)
        self._timeout = timeout

    async def cached(self, server: str) -> list[ToolInfo] | None:
        raw = await self._redis.get(self._keys.tools(server))
        return None if raw is None else _TOOLS.validate_json(raw)

    async def put(self, server: str, tools: list[ToolInfo]) -> None:
        await self._redis.set(self._keys.tools(server), _TOOLS.dump_json(tools), px=self._refresh_ms)

    async def fetch(self, server: str) -> list[ToolInfo]:
        """Ask the backend itself (a short session), and cache the answer."""
        tools = await self._ask(server, None)
        await self.put(server, tools)
        return tools

    async def tenant_cached(self, server: str, tenant: str, tag: str) -> list[ToolInfo] | None:
        """The tenant's cached list, when it was listed with the credential tagged `tag`."""
        raw = await self._redis.get(self._keys.tenant_tools(server, tenant))
        if raw is None:
            return None
        kept = _TenantTools.model_validate_json(raw)
        return kept.tools if kept.tag == tag else None

    async def tenant_put(self, server: str, tenant: str, tag: str, tools: list[ToolInfo]) -> None:
        kept = _TenantTools(tag=tag, tools=tools).model_dump_json().encode()
        await self._redis.set(self._keys.tenant_tools(server, tenant), kept, ex=TENANT_TOOLS_TTL_SECONDS)

    async def tenant_fetch(self, server: str, tenant: str, tag: str, presented: Presented) -> list[ToolInfo]:
        """Ask the backend as the tenant (a short session carrying `presented`), and cache the answer for it."""
        tools = await self._ask(server, presented)
        await self.tenant_put(server, tenant, tag, tools)
        return tools

    async def _ask(self, server: str, presented: Presented | None) -> list[ToolInfo]:
        backend = self._registry.get(server)
        if backend is None:
            raise KeyError(server)

        async def ask() -> list[ToolInfo]:
            async with connect(backend, self._timeout, presented=presented) as client:
                return await list_tools(client)

        async with asyncio.timeout(self._timeout):  # not wait_for, which on 3.11 can lose a cancel
            return await ask()

    async def tools(self, server: str) -> list[ToolInfo]:
        """The cached list, or a fresh one when the cache is empty or stale."""
        cached = await self.cached(server)
        return cached if cached is not None else await self.fetch(server)  # an empty list is a valid answer
