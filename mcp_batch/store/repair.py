"""The repair pass (`Store.repair`): each tenant's count of unfinished items reconciled with its living batches.

A batch's items are counted up at submit and down as they finish (in renewals and at its end, ending.py). On one
Redis both happen in the batch's own scripts; across slots or Redises they are second steps, and every path keeps the
count high rather than low when something fails between two steps (a crash after a script), so a count can only leak
upwards, and a leaked count refuses the tenant (429) with nothing running. The pass reads
what the tenant's batches still hold (a living batch: its items not yet taken off, `total - counted`; an ended one:
its `settle` not yet applied) and takes the difference off the tenant's count, and the same off the service's,
only when the count is higher than that and did not move while it was read (compare-and-take, one script on the
tenant's slot: a submit or a finish meanwhile leaves it to the next pass). A tenant with a batch younger than
`_YOUNG_MS` that has no hash yet (a submit between its steps) is left to the next pass too.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH, BatchStatus

_YOUNG_MS = 60_000  # a batch listed without a hash younger than this may be a submit in progress
_CHUNK = 1_000  # batches read in one pipeline
_FIELDS = ["status", "total", "counted", "finished", "settle"]

# KEYS: the tenant's unfinished count. ARGV: the count as read, what it should be. Returns what was taken off.
_TAKE = """
local now = tonumber(redis.call('GET', KEYS[1]) or '0')
if now ~= tonumber(ARGV[1]) or now <= tonumber(ARGV[2]) then return 0 end
redis.call('DECRBY', KEYS[1], now - tonumber(ARGV[2]))
return now - tonumber(ARGV[2])
"""


def _held(row: list[bytes | None]) -> int:
    """What one batch's row says the unfinished counts still hold of it."""
    status, total, counted, finished, settle = (None if v is None else v.decode() for v in row)
    if status is None or total is None:
        return 0
    if BatchStatus(status) in TERMINAL_BATCH:
        return int(settle or 0)
    return max(0, int(total) - int(counted or finished or 0))


class Repair:
    """Reconciles the tenants' unfinished counts with their living batches."""

    def __init__(self, redis: Redis, keys: Keys, control: Redis | None = None) -> None:
        self.redis = redis
        self.control = redis if control is None else control
        self.keys = keys
        self._take = redis.register_script(_TAKE)

    async def tenants(self) -> AsyncIterator[str]:
        """Every tenant with an unfinished count (on a cluster, found on every node)."""
        head, tail = self.keys.tenant_unfinished("*").split("*")
        async for raw in self.redis.scan_iter(match=f"{head}*{tail}", count=1_000):
            name = raw.decode()
            yield name[len(head) : len(name) - len(tail)]

    async def tenant(self, tenant: str) -> int:
        """Reconcile one tenant's count; how many items it held that no living batch does (taken off now)."""
        count_key = self.keys.tenant_unfinished(tenant)
        seen = int(cast(bytes | None, await self.redis.get(count_key)) or 0)
        listed = await self.redis.zrange(self.keys.tenant_batches(tenant), 0, -1, withscores=True)
        young = (time.time() * 1_000 - _YOUNG_MS) * 1_000  # the list is scored in µs
        held = 0
        for start in range(0, len(listed), _CHUNK):
            chunk = listed[start : start + _CHUNK]
            async with self.redis.pipeline(transaction=False) as pipe:
                for batch_id, _ in chunk:
                    pipe.hmget(self.keys.batch(batch_id.decode()), _FIELDS)
                rows = await pipe.execute()
            for (_, created), row in zip(chunk, rows, strict=True):
                if row[0] is None and created > young:
                    return 0  # a submit may be between its steps: the next pass sees it whole
                held += _held(row)
        taken = int(await self._take([count_key], [seen, held]))
        if taken:
            await self.control.decrby(self.keys.unfinished, taken)
        return taken

    async def every_tenant(self) -> int:
        """One pass over every tenant; how many leaked items it took off."""
        return sum([await self.tenant(tenant) async for tenant in self.tenants()])
