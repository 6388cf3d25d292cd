"""The completion webhooks due, claimed one attempt at a time so that exactly one worker sends each attempt.

`{p}:webhooks` scores each batch id by when its webhook is next due (ms, Redis clock); the store's `finalize` adds
a batch at 0 when it ends with a `webhook_url` in its meta. Claiming an attempt is one script: the entry must still
be due, its score moves to now + a lease (so a worker that dies mid-delivery only delays the next attempt), the
batch's `webhook_attempts` counts it and the URL is read. Settling removes the entry (delivered, failed) or moves it
to when the next attempt is due, unless a later attempt was claimed meanwhile (the lease lapsed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.models import WebhookStatus

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: 1 webhooks. ARGV: 1 most ids. Returns {ms until the next is due (-1: none), due batch ids...}.
_PEEK = (
    _NOW
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #due > 0 then return {0, unpack(due)} end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then return {-1} end
return {math.max(0, tonumber(first[2]) - now)}
"""
)

# KEYS: 1 webhooks, 2 the batch's meta. ARGV: 1 batch id, 2 lease ms.
# Returns {attempt, url}, {0} when the entry is not due (another worker claimed it), {-1} when the batch is gone.
_CLAIM = (
    _NOW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > now then return {0} end
local url = redis.call('HGET', KEYS[2], 'webhook_url')
if not url then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return {-1}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], 'webhook_status', 'pending')
return {redis.call('HINCRBY', KEYS[2], 'webhook_attempts', 1), url}
"""
)

# KEYS: 1 webhooks, 2 the batch's meta. ARGV: 1 batch id, 2 attempt, 3 status, 4 ms until the next attempt (retry).
# Returns 1, or 0 when this attempt is no longer the latest.
_SETTLE = (
    _NOW
    + """
if tonumber(redis.call('HGET', KEYS[2], 'webhook_attempts') or '0') ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == 'pending' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('HSET', KEYS[2], 'webhook_status', ARGV[3])
return 1
"""
)


@dataclass(frozen=True)
class Attempt:
    """One claimed delivery: the batch, which attempt this is (1 = first) and where to send it."""

    batch_id: str
    number: int
    url: str


class WebhookQueue:
    """Peek, claim and settle webhook deliveries."""

    def __init__(self, redis: Redis, keys: Keys, lease_seconds: float) -> None:
        self.redis = redis
        self.keys = keys
        self.lease_ms = int(lease_seconds * 1000)
        self._peek = redis.register_script(_PEEK)
        self._claim = redis.register_script(_CLAIM)
        self._settle = redis.register_script(_SETTLE)

    async def due(self, limit: int) -> tuple[list[str], float | None]:
        """Up to `limit` batch ids whose webhook is due, and (when none is) seconds until one is (None: none)."""
        reply = cast(list[Any], await self._peek([self.keys.webhooks], [limit]))
        wait = int(reply[0])
        return [member.decode() for member in reply[1:]], None if wait < 0 else wait / 1000

    async def claim(self, batch_id: str) -> Attempt | None:
        """The next attempt of this batch's webhook, or None when another worker has it or the batch is gone."""
        reply = cast(
            list[Any], await self._claim([self.keys.webhooks, self.keys.batch(batch_id)], [batch_id, self.lease_ms])
        )
        number = int(reply[0])
        return Attempt(batch_id, number, reply[1].decode()) if number > 0 else None

    async def settle(self, attempt: Attempt, status: WebhookStatus, retry_in: float = 0.0) -> bool:
        """Record the attempt's outcome: delivered, failed (given up), or pending (again in `retry_in` seconds)."""
        keys = [self.keys.webhooks, self.keys.batch(attempt.batch_id)]
        args: list[str | int] = [attempt.batch_id, attempt.number, status.value, int(retry_in * 1000)]
        return bool(await self._settle(keys, args))
