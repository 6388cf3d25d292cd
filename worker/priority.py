"""The worker's part of priority (backends/priority.py): a shard job of a `high` or `normal` batch says it runs on
the batch's rate-limited backends for as long as it does, and the gate holds a call of a lower rank back to its turn
while a higher one runs.

A call that finds no higher rank running trusts that for `_RECHECK` seconds (per backend, tenant and rank in this
process), so a tenant that never uses priority pays one round trip per that interval, not one per call."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress

from redis.exceptions import RedisError

from mcp_batch.backends.priority import Priorities
from mcp_batch.backends.servers_file import RateLimit
from mcp_batch.models import Priority
from mcp_batch.store.outage import with_redis_retry

logger = logging.getLogger(__name__)

_RECHECK = 0.1  # seconds a clear answer is trusted: how late a lower rank notices a higher one starting
_HORIZON = 2.0  # seconds: the furthest turn a call books; one further away asks again (the higher rank may end)
_NEAR = 0.02  # seconds: how near its rate slot must be before a `low` call books it


class PriorityTurns:
    """Turns of the calls below `high`, in this process."""

    def __init__(self, priorities: Priorities, outage_seconds: float) -> None:
        self.priorities = priorities
        self.outage_seconds = outage_seconds
        self._clear_until: dict[tuple[str, str, Priority], float] = {}

    async def wait(self, server: str, tenant: str, priority: Priority, limit: RateLimit) -> float | None:
        """Return once a call of `priority` may take its rate slot on `server` (`limit`: the tenant's rate): how
        near that slot must be to be booked (None: as near as any call's).

        A `low` call that found no higher rank running books only a slot `_NEAR` away: the slots booked ahead are
        those a `high` batch starting now must wait behind, and a low batch's lanes would otherwise hold one each."""
        if priority is Priority.high:
            return None
        near = _NEAR if priority is Priority.low else None
        key = (server, tenant, priority)
        if self._clear_until.get(key, 0.0) > time.monotonic():
            return near
        while True:
            turn = await with_redis_retry(
                lambda: self.priorities.turn(server, tenant, priority, limit, _HORIZON), outage=self.outage_seconds
            )
            if turn.clear:
                self._clear_until[key] = time.monotonic() + _RECHECK
                return near
            # a turn is waited for, not polled: booked, exactly its wait; too far to book, until it is near
            await asyncio.sleep(turn.wait if turn.booked else min(turn.wait, _HORIZON) / 2)
            if turn.booked:
                return None  # its turn is its share: the rate slot after it is booked as any call's


async def hold(
    turns: PriorityTurns | None, servers: list[str], tenant: str, priority: Priority, job: str, every: float
) -> None:
    """While the shard job runs on `servers` (until this task is cancelled), keep saying so every `every` seconds
    (it lapses after three of them); the ranks below are let go at once when it ends."""
    if turns is None or priority is Priority.low or not servers:
        return
    priorities = turns.priorities
    try:
        while True:
            try:
                await priorities.hold(servers, tenant, priority, job, every * 3)
            except (RedisError, OSError) as exc:
                logger.warning("could not renew job %s's priority: %s", job, type(exc).__name__)
            await asyncio.sleep(every)  # a periodic duty, like the lease it goes with
    finally:
        with suppress(RedisError, OSError):
            await priorities.release(servers, tenant, priority, job)
