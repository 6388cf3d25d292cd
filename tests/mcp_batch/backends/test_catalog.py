"""The tool-list cache against the real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.servers_file import Registry
from mcp_batch.keys import Keys


async def test_a_cached_list_is_served_without_asking_the_backend_even_when_empty(redis: aioredis.Redis) -> None:
    catalog = Catalog(redis, Keys(), Registry({}), refresh_seconds=60, timeout=1)  # no backend to ask
    await catalog.put("quiet", [])
    await catalog.put("busy", [ToolInfo(name="echo")])
    assert await catalog.tools("quiet") == []
    assert [t.name for t in await catalog.tools("busy")] == ["echo"]
