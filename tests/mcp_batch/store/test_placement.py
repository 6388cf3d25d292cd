"""A new batch's id on one Redis: random, as any (on a cluster it also picks the master: tests/mcp_batch/store/
test_connection.py submits 30 batches to a real 3-master cluster and finds 10 on each)."""

from __future__ import annotations

import redis.asyncio as aioredis

from mcp_batch.keys import is_batch_id
from mcp_batch.store.placement import Placement


async def test_on_one_redis_every_id_is_fresh_and_random(redis: aioredis.Redis) -> None:
    placement = Placement(redis)
    ids = {placement.new_id() for _ in range(100)}
    assert len(ids) == 100 and all(is_batch_id(batch_id) for batch_id in ids)
