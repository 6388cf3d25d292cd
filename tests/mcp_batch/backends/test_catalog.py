"""The tool-list cache against the real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.catalog import Catalog, credential_tag
from mcp_batch.backends.servers_file import Registry
from mcp_batch.keys import TENANT_TOOLS_TTL_SECONDS, Keys


async def test_a_cached_list_is_served_without_asking_the_backend_even_when_empty(redis: aioredis.Redis) -> None:
    catalog = Catalog(redis, Keys(), Registry({}), refresh_seconds=60, timeout=1)  # no backend to ask
    await catalog.put("quiet", [])
    await catalog.put("busy", [ToolInfo(name="echo")])
    assert await catalog.tools("quiet") == []
    assert [t.name for t in await catalog.tools("busy")] == ["echo"]


async def test_a_tenants_list_is_its_own_and_served_only_to_the_credential_it_was_listed_with(
    redis: aioredis.Redis,
) -> None:
    catalog = Catalog(redis, Keys(), Registry({}), refresh_seconds=60, timeout=1)
    first, again = credential_tag(b"sealed one"), credential_tag(b"sealed two")
    await catalog.tenant_put("guarded", "acme", first, [ToolInfo(name="whoami")])
    assert [t.name for t in await catalog.tenant_cached("guarded", "acme", first) or []] == ["whoami"]
    assert await catalog.tenant_cached("guarded", "acme", again) is None  # the credential changed: listed anew
    assert await catalog.tenant_cached("guarded", "bravo", first) is None
    assert await catalog.cached("guarded") is None  # nobody else's list
    assert 0 < await redis.ttl(Keys().tenant_tools("guarded", "acme")) <= TENANT_TOOLS_TTL_SECONDS
