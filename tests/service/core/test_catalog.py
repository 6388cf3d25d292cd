"""The tool-list cache against the real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from service.core.backends import Registry
from service.core.catalog import Catalog
from service.core.keys import Keys
from service.core.models import ToolInfo


async def test_a_cached_list_is_served_without_asking_the_backend_even_when_empty(redis: aioredis.Redis) -> None:
    catalog = Catalog(redis, Keys(), Registry({}), refresh_seconds=60, timeout=1)  # no backend to ask
    await catalog.put("quiet", [])
    await catalog.put("busy", [ToolInfo(name="echo")])
    assert await catalog.tools("quiet") == []
    assert [t.name for t in await catalog.tools("busy")] == ["echo"]
