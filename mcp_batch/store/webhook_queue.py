"""The completion webhooks due, claimed one attempt at a time so that exactly one worker sends each attempt.

`{p}:webhooks` (control plane) scores each batch id by when its webhook is next due (ms, that Redis's clock): a
submit with a `webhook_url` adds it at the batch's live TTL (a fallback), and the batch's end moves it to 0
(ending.py). Claiming an attempt is two scripts, one per slot: on the control plane the entry must still be due and
its score moves to now + a lease (so exactly one worker claims it, and one that dies mid-delivery only delays the next
attempt); then on the batch's slot its `webhook_attempts` counts it and the URL is read, unless the batch is gone,
not ended yet (the fallback came due first) or its webhook already settled. Settling writes the batch's
`webhook_status` first, unless a later attempt was claimed meanwhile (the lease lapsed), then removes the entry
(delivered, failed) or moves it to when the next attempt is due: a crash between leaves an entry whose claim finds
it settled and drops it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.models import WebhookStatus
from mcp_batch.store.scripts import TERMINAL_SET

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

# KEYS: 1 webhooks. ARGV: 1 batch id, 2 lease ms. Returns 1 (claimed) or 0 (not due: another worker claimed it).
_CLAIM = (
    _NOW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > now then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
"""
)

# KEYS: 1 the batch's meta. Returns {attempt, url}, {-1} when the batch is gone or its webhook settled (the entry
# goes), {-2} when it has not ended (the entry waits for its end).
_ATTEMPT = (
    TERMINAL_SET
    + """
local m = redis.call('HMGET', KEYS[1], 'webhook_url', 'status', 'webhook_status')
if not m[1] or m[3] == 'delivered' or m[3] == 'failed' then return {-1} end
if not TERMINAL[m[2]] then return {-2} end
redis.call('HSET', KEYS[1], 'webhook_status', 'pending')
return {redis.call('HINCRBY', KEYS[1], 'webhook_attempts', 1), m[1]}
"""
)

# KEYS: 1 the batch's meta. ARGV: 1 attempt, 2 status. Returns 1, or 0 when this attempt is no longer the latest.
_SETTLE = """
if tonumber(redis.call('HGET', KEYS[1], 'webhook_attempts') or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'webhook_status', ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Attempt:
    """One claimed delivery: the batch, which attempt this is (1 = first) and where to send it."""

    batch_id: str
    number: int
    url: str


class WebhookQueue:
    """Peek, claim and settle webhook deliveries."""

    def __init__(self, redis: Redis, keys: Keys, lease_seconds: float, control: Redis | None = None) -> None:
        self.redis = redis
        self.control = redis if control is None else control
        self.keys = keys
        self.lease_ms = int(lease_seconds * 1000)
        self._peek = self.control.register_script(_PEEK)
        self._claim = self.control.register_script(_CLAIM)
        self._attempt = redis.register_script(_ATTEMPT)
        self._settle = redis.register_script(_SETTLE)

    async def due(self, limit: int) -> tuple[list[str], float | None]:
        """Up to `limit` batch ids whose webhook is due, and (when none is) seconds until one is (None: none)."""
        reply = cast(list[Any], await self._peek([self.keys.webhooks], [limit]))
        wait = int(reply[0])
        return [member.decode() for member in reply[1:]], None if wait < 0 else wait / 1000

    async def claim(self, batch_id: str) -> Attempt | None:
        """The next attempt of this batch's webhook, or None when another worker has it or the batch is gone."""
        if not int(await self._claim([self.keys.webhooks], [batch_id, self.lease_ms])):
            return None
        reply = cast(list[Any], await self._attempt([self.keys.batch(batch_id)], []))
        number = int(reply[0])
        if number == -1:
            await self.control.zrem(self.keys.webhooks, batch_id)
        return Attempt(batch_id, number, reply[1].decode()) if number > 0 else None

    async def settle(self, attempt: Attempt, status: WebhookStatus, retry_in: float = 0.0) -> bool:
        """Record the attempt's outcome: delivered, failed (given up), or pending (again in `retry_in` seconds)."""
        if not int(await self._settle([self.keys.batch(attempt.batch_id)], [attempt.number, status.value])):
            return False
        if status == WebhookStatus.pending:
            await self.control.zadd(self.keys.webhooks, {attempt.batch_id: await self._now_ms() + int(retry_in * 1000)})
        else:
            await self.control.zrem(self.keys.webhooks, attempt.batch_id)
        return True

    async def _now_ms(self) -> int:
        seconds, micros = await self.control.time()
        return int(seconds) * 1000 + int(micros) // 1000
