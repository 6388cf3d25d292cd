"""Each backend's tools/list, cached in Redis so API and workers can tell an unknown tool without calling it."""

from __future__ import annotations

import asyncio

from pydantic import TypeAdapter
from redis.asyncio import Redis

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.connect import connect, list_tools
from mcp_batch.backends.servers_file import Registry
from mcp_batch.keys import Keys

_TOOLS = TypeAdapter(list[ToolInfo])


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
        backend = self._registry.get(server)
        if backend is None:
            raise KeyError(server)

        async def ask() -> list[ToolInfo]:
            async with connect(backend, self._timeout) as client:
                return await list_tools(client)

        async with asyncio.timeout(self._timeout):  # not wait_for, which on 3.11 can lose a cancel
            tools = await ask()
        await self.put(server, tools)
        return tools

    async def tools(self, server: str) -> list[ToolInfo]:
        """The cached list, or a fresh one when the cache is empty or stale."""
        cached = await self.cached(server)
        return cached if cached is not None else await self.fetch(server)  # an empty list is a valid answer
