"""Replicas, and what a worker waits for before it sends a call that may write.

A worker claims an item (a write to the primary) before it sends the call, so that whoever takes the item over knows
the call may have run. Replication is asynchronous: a claim the primary acknowledged can vanish when a replica is
promoted (a Sentinel or cluster failover), and then the item would be claimed and sent again. So before a call that
may write, the worker waits for its claim to reach the replicas (`WAIT n timeout`), and where the durability mode
asks for it, for the local disk too (`WAITAOF 1 0 timeout`, see durability.py), both in one round trip.

WAIT counts what the connection it is sent on wrote, and a pool hands out any connection: so a write of its own (the
probe, a short-lived key) goes first on the same connection. Replication is in order, so once the probe has reached
a replica, so has every claim acknowledged before it. On a cluster the caller passes the connection (and a probe
key) of the node that holds the claim.

How many replicas (`MCP_BATCH_REPLICA_WAIT_COUNT`): unset, every replica the primary reports connected (re-read at
most once a second, so a replica that leaves stops being waited for, and one that joins starts being); a number, at
least that many, always. No replicas and no count: nothing is waited for.

A wait that falls short (fewer replicas within `MCP_BATCH_REPLICA_WAIT_SECONDS`, or Redis failed mid-wait) raises
`ReplicaWaitFailed`: the call is not sent, and the item ends `error` with code `replica_wait_failed`, which a retry
of the batch runs again. Never sending it is the one safe choice: the claim may be lost in a failover, and a write
sent under a lost claim could be sent a second time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from mcp_batch.errors import ReplicaWaitFailed

logger = logging.getLogger(__name__)

WAITAOF_TIMEOUT_MS = 2_000  # longest a worker waits for a claim to reach the disk (everysec fsyncs each second)
_RECOUNT_SECONDS = 1.0  # how long a count of connected replicas is trusted


@dataclass(frozen=True)
class Replication:
    """What the primary says of its replicas (`INFO replication`): its role (None: Redis refused INFO) and how many
    replicas are online (linked and past their first sync: the ones a WAIT can count)."""

    role: str | None
    replicas: int

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "replicas": self.replicas}


async def read(redis: Redis) -> Replication:
    """Ask Redis; one that refuses INFO reads as no replicas seen."""
    try:
        info = await redis.info("replication")
    except ResponseError:
        return Replication(None, 0)
    online = [
        v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"
    ]
    return Replication(str(info.get("role")), len(online))


def wait_policy(count: int | None, seconds: float) -> str:
    """What a write's claim waits for, in words: `off`, `every replica seen` or `N replicas`."""
    if seconds <= 0 or count == 0:
        return "off"
    return "every replica seen" if count is None else f"{count} replicas"


class WriteGuard:
    """Waits, before a call that may write, for its claim to reach the replicas and (`disk`) the local disk.

    `count` None: every replica seen; `timeout` the longest wait for replicas, in seconds (0: none waited for)."""

    def __init__(self, disk: bool, count: int | None, timeout: float) -> None:
        self.disk, self.count, self.timeout = disk, count, timeout
        self._seen, self._seen_at = 0, -_RECOUNT_SECONDS

    @property
    def waits_for_replicas(self) -> bool:
        """A wait for replicas may happen: a count asked for, or every replica seen."""
        return self.timeout > 0 and self.count != 0

    async def wanted(self, redis: Redis, fresh: bool = False) -> int:
        """How many replicas the next wait asks for."""
        if not self.waits_for_replicas:
            return 0
        if self.count is not None:
            return self.count
        if fresh or time.monotonic() - self._seen_at >= _RECOUNT_SECONDS:
            seen = (await read(redis)).replicas
            if seen != self._seen:
                logger.info("the primary has %d replicas connected (was %d): writes wait for each", seen, self._seen)
            self._seen, self._seen_at = seen, time.monotonic()
        return self._seen

    async def __call__(self, redis: Redis, probe: str) -> None:
        """Return once the claims this worker wrote so far are on the replicas asked for (and on disk); raise
        ReplicaWaitFailed otherwise: the call must not be sent."""
        replicas = 0
        try:
            replicas = await self.wanted(redis)
            if replicas == 0 and not self.disk:
                return
            async with redis.pipeline(transaction=False) as pipe:  # one connection for the probe and the waits
                pipe.set(probe, 1, px=60_000)
                if self.disk:
                    pipe.execute_command("WAITAOF", 1, 0, WAITAOF_TIMEOUT_MS)
                if replicas:
                    pipe.execute_command("WAIT", replicas, round(self.timeout * 1000))
                replies = await pipe.execute()
            acked = int(replies[-1]) if replicas else 0
            if acked < replicas and (self.count is not None or acked < await self.wanted(redis, fresh=True)):
                raise ReplicaWaitFailed(acked, replicas, self.timeout)
        except (RedisError, OSError) as exc:
            raise ReplicaWaitFailed(None, replicas, self.timeout) from exc
        if self.disk and int(replies[1][0]) < 1:
            logger.warning("a claim was not on disk within %d ms; sending the call anyway", WAITAOF_TIMEOUT_MS)
