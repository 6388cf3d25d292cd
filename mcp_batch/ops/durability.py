"""What Redis promises to keep if its host crashes, read at start-up by the API and every worker.

A worker claims an item (a write to Redis) before it sends the call, so that a replacement worker knows the call may
have run and never sends a non-idempotent call twice. That holds only for claims Redis still has after a restart:
- `appendonly no`: a restart keeps the last RDB snapshot at best; claims since then are lost.
- `appendonly yes`, `appendfsync everysec` (Redis's default): a crash of the Redis process loses nothing (the kernel
  still writes the file), but a crash of its host loses up to the last second of the file.
- `appendonly yes`, `appendfsync always`: every write is on disk before Redis replies; nothing acknowledged is lost.
With anything but `always`, a claim lost that way lets a write run again, and the item still reports `ok`.

Where the server has WAITAOF (Redis 7.2 and later, Valkey), a worker waits for the claim of a non-idempotent call to
reach the disk before sending it (`WAITAOF 1 0`, in replication.py's WriteGuard, with the wait for replicas), which
closes that gap under `everysec` too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from mcp_batch.ops import replication
from mcp_batch.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Durability:
    """Redis's persistence settings as read (None: Redis refused CONFIG GET), whether it has WAITAOF, the replicas
    online and what a write's claim waits for on them (replication.wait_policy)."""

    appendonly: str | None
    appendfsync: str | None
    waitaof: bool
    replicas: int = 0
    replica_wait: str = "off"

    @property
    def mode(self) -> str:
        if self.appendonly is None:
            return "unknown (Redis refused CONFIG GET)"
        if self.appendonly != "yes":
            return "no append-only file"
        return f"append-only, appendfsync {self.appendfsync}"

    @property
    def waits_for_disk(self) -> bool:
        """A worker waits with WAITAOF for each write's claim: there is a file, it is not fsynced on every write,
        and the server can tell when it is."""
        return self.appendonly == "yes" and self.appendfsync != "always" and self.waitaof

    @property
    def writes_may_repeat(self) -> bool:
        """After a crash of Redis's host, a write's claim may be lost and the write run again."""
        return not (self.appendonly == "yes" and (self.appendfsync == "always" or self.waits_for_disk))

    @property
    def writes_may_repeat_after_failover(self) -> bool:
        """A replica promoted in a failover may lack a write's claim, and the write run again: there are replicas and
        claims do not wait for them."""
        return self.replicas > 0 and self.replica_wait == "off"

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "appendonly": self.appendonly,
            "appendfsync": self.appendfsync,
            "waitaof": self.waitaof,
            "writes_may_repeat_after_host_crash": self.writes_may_repeat,
            "replicas": self.replicas,
            "replica_wait": self.replica_wait,
            "writes_may_repeat_after_failover": self.writes_may_repeat_after_failover,
        }


async def read(redis: Redis, settings: Settings | None = None) -> Durability:
    """Ask Redis; a Redis that refuses CONFIG (renamed or denied, as managed services do) reads as unknown. With
    `settings`, also what a write's claim waits for on the replicas."""
    try:
        config = await redis.config_get("appendonly")
        config |= await redis.config_get("appendfsync")
        appendonly, appendfsync = _text(config.get("appendonly")), _text(config.get("appendfsync"))
    except ResponseError:
        appendonly = appendfsync = None
    waitaof = await _has_waitaof(redis)
    if settings is None:
        return Durability(appendonly, appendfsync, waitaof)
    replicas = (await replication.read(redis)).replicas
    policy = replication.wait_policy(settings.replica_wait_count, settings.replica_wait_seconds)
    return Durability(appendonly, appendfsync, waitaof, replicas, policy)


async def _has_waitaof(redis: Redis) -> bool:
    """Whether the server knows WAITAOF: asked to wait for nothing, it answers at once; a Redis before 7.2 calls it
    an unknown command (redis-py cannot parse COMMAND INFO's reply for an unknown command)."""
    try:
        await redis.execute_command("WAITAOF", 0, 0, 0)  # type: ignore[no-untyped-call]
    except ResponseError:
        return False
    return True


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else None if value is None else str(value)


def log_at_start(durability: Durability, process: str) -> None:
    """One warning when writes may run again after a host crash; one line when WAITAOF is unavailable."""
    if durability.writes_may_repeat:
        logger.warning(
            "%s: Redis durability is %s: after a crash of Redis's host, claims written in the last moments may be "
            "lost and non-idempotent calls run again (reported ok); set appendonly yes and appendfsync always "
            "(see docs/operations.md, Redis durability)",
            process,
            durability.mode,
        )
    else:
        logger.info("%s: Redis durability is %s", process, durability.mode)
    wait = f"wait for {durability.replica_wait} (WAIT)" if durability.replica_wait != "off" else "do not wait"
    if durability.writes_may_repeat_after_failover:
        logger.warning(
            "%s: %d replicas online and claims of writes do not wait for them: a failover may lose claims and run "
            "non-idempotent calls again; leave MCP_BATCH_REPLICA_WAIT_SECONDS above 0 (see docs/operations.md, Past "
            "one Redis)",
            process,
            durability.replicas,
        )
    else:
        logger.info("%s: %d replicas online; claims of writes %s", process, durability.replicas, wait)
    if not durability.waitaof:
        logger.info(
            "%s: this Redis has no WAITAOF (Redis 7.2+, Valkey): claims of writes are not awaited on disk", process
        )
