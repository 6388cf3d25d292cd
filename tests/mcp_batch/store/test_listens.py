"""Open listens' leases against the real Redis: a holder takes at most its most, a dropped one frees its slot at
once, one not renewed frees it when its lease lapses, and holders do not share slots."""

from __future__ import annotations

import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.store import Store
from tests.support import eventually


async def test_a_holder_takes_at_most_its_most_and_a_lapsed_or_dropped_lease_frees_a_slot(
    redis: aioredis.Redis,
) -> None:
    listens = Store(redis, Keys(), 60).listens
    assert await listens.take("k1", "a", 2, 60) and await listens.take("k1", "b", 2, 0.3)
    assert not await listens.take("k1", "c", 2, 60)
    assert await listens.take("k2", "a", 2, 60)  # another key's slots are its own
    await eventually(lambda: listens.take("k1", "c", 2, 60), what="the unrenewed lease lapsing")
    await listens.drop("k1", "a")
    assert await listens.open("k1") == 1
    await listens.renew("k1", "c", 60)
    assert await listens.take("k1", "d", 2, 60) and await listens.open("k1") == 2
