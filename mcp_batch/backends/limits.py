"""Per-backend limits that hold across every worker: a GCRA rate limiter and a lease semaphore, both in Redis.

Rate: the token bucket in its exact GCRA form, one hash per backend holding the theoretical arrival time (TAT) of
each bucket (per second, per minute). `reserve` books the caller's slot in one round trip and says how long to wait
for it; the caller sleeps exactly that, so there is no check-sleep-retry loop. A slot further away than the caller
will wait is refused at once, without booking. The clock is Redis `TIME`, so worker clocks never skew the limit.

Concurrency: a sorted set of leases scored by expiry, so the leases of a dead worker free themselves. A release is
published, and waiters wake on it instead of polling.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from mcp_batch.backends.servers_file import RateLimit
from mcp_batch.keys import Keys

# KEYS: rate hash. ARGV: max wait µs, then (field, emission interval µs, tolerance µs) per bucket.
# Returns {granted 0/1, wait µs}. Times are µs since the epoch, exact in a double.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max_wait = tonumber(ARGV[1])
local buckets, admit, longest = {}, now, 0
local paused = tonumber(redis.call('HGET', KEYS[1], 'pause') or 0)
if paused > admit then admit = paused end
for i = 2, #ARGV, 3 do
  local tat = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or now)
  if tat < now then tat = now end
  local b = {field = ARGV[i], interval = tonumber(ARGV[i + 1]), tat = tat}
  local allowed_at = tat - tonumber(ARGV[i + 2])
  if allowed_at > admit then admit = allowed_at end
  if b.interval + tonumber(ARGV[i + 2]) > longest then longest = b.interval + tonumber(ARGV[i + 2]) end
  buckets[#buckets + 1] = b
end
local wait = admit - now
if wait > max_wait then return {0, string.format('%.0f', wait)} end
for _, b in ipairs(buckets) do
  local base = b.tat
  if admit > base then base = admit end
  redis.call('HSET', KEYS[1], b.field, string.format('%.0f', base + b.interval))
end
redis.call('PEXPIRE', KEYS[1], math.ceil((wait + longest) / 1000) + 60000)
return {1, string.format('%.0f', wait)}
"""

# KEYS: rate hash. ARGV: pause µs. Nobody is admitted before now + pause.
_PUSH_BACK = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1])
if until_ > tonumber(redis.call('HGET', KEYS[1], 'pause') or 0) then
  redis.call('HSET', KEYS[1], 'pause', string.format('%.0f', until_))
end
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1]) / 1000) + 120000)
return 1
"""

# KEYS: lease zset. ARGV: limit, lease id, lease ms. Returns 1 (leased) or the ms until the next lease expires.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 60000)
  return {1, 0}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(first[2]) - now}
"""

# KEYS: lease zset. ARGV: lease id, channel, server.
_RELEASE = """
return redis.call('ZREM', KEYS[1], ARGV[1])
"""

_US = 1_000_000


@dataclass(frozen=True)
class Bucket:
    """One GCRA bucket: one call per `interval` µs, `tolerance` µs of burst."""

    field: str
    interval: int
    tolerance: int


def buckets(limit: RateLimit) -> list[Bucket]:
    """The GCRA buckets of a rate limit: `burst` calls at once, then `per_second` (and `per_minute`) on average."""
    burst = limit.burst or 1
    result = []
    for field, per, seconds in (("s", limit.per_second, 1), ("m", limit.per_minute, 60)):
        if per:
            interval = round(seconds * _US / per)
            result.append(Bucket(field, interval, (burst - 1) * interval))
    return result


def share_of(limit: RateLimit, share: float) -> RateLimit:
    """A tenant's part of a backend's rate limit: `share` of its rates, and of its burst (at least one call)."""
    return RateLimit(
        per_second=limit.per_second * share if limit.per_second else None,
        per_minute=limit.per_minute * share if limit.per_minute else None,
        burst=max(1, int((limit.burst or 1) * share)),
    )


@dataclass(frozen=True)
class Reservation:
    """The answer of `reserve`: granted (wait `wait` seconds, then call) or refused (the slot was `wait` away)."""

    granted: bool
    wait: float


class RateLimiter:
    """GCRA in Redis, shared by every worker."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self._reserve = redis.register_script(_RESERVE)
        self._push_back = redis.register_script(_PUSH_BACK)

    async def reserve(
        self, server: str, limit: RateLimit | None, max_wait: float, tenant: str | None = None
    ) -> Reservation:
        """Book the next slot (`limit` None: only a backend's pause applies); with `tenant`, in that tenant's own
        bucket of the backend (its share, see `share_of`)."""
        args: list[Any] = [round(max_wait * _US)]
        for b in buckets(limit) if limit else ():
            args += [b.field, b.interval, b.tolerance]
        key = self._keys.rate(server) if tenant is None else self._keys.tenant_rate(server, tenant)
        granted, wait = await self._reserve(keys=[key], args=args)
        return Reservation(bool(int(granted)), int(wait) / _US)

    async def push_back(self, server: str, pause: float) -> None:
        """The backend refused us (429): admit nobody, on any worker, for `pause` seconds."""
        await self._push_back(keys=[self._keys.rate(server)], args=[round(pause * _US)])

    async def tokens(self, server: str, limit: RateLimit) -> float:
        """Calls that could start now without waiting (the bucket's current allowance)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.hgetall(self._keys.rate(server))
            (sec, usec), tats = await pipe.execute()
        now = sec * _US + usec
        available = []
        for b in buckets(limit):
            tat = max(float(tats.get(b.field.encode(), now)), now)
            available.append(max(0.0, (b.tolerance - (tat - now)) / b.interval + 1))
        return min(available, default=0.0)


class LocalRateLimiter:
    """The same GCRA kept in this process only: what a per-process limiter does (for comparison and tests).

    With N processes it admits N times the limit; the Redis limiter exists because of that.
    """

    def __init__(self) -> None:
        self._tats: dict[tuple[str, str], float] = {}

    async def reserve(
        self, server: str, limit: RateLimit | None, max_wait: float, tenant: str | None = None
    ) -> Reservation:
        server = server if tenant is None else f"{server}\n{tenant}"
        now = time.time() * _US
        admit = max(now, self._tats.get((server, "pause"), 0))
        todo = buckets(limit) if limit else []
        for b in todo:
            admit = max(admit, max(self._tats.get((server, b.field), now), now) - b.tolerance)
        wait = admit - now
        if wait > max_wait * _US:
            return Reservation(False, wait / _US)
        for b in todo:
            self._tats[(server, b.field)] = max(self._tats.get((server, b.field), now), admit) + b.interval
        return Reservation(True, wait / _US)

    async def push_back(self, server: str, pause: float) -> None:
        key = (server, "pause")
        self._tats[key] = max(self._tats.get(key, 0), (time.time() + pause) * _US)

    async def tokens(self, server: str, limit: RateLimit) -> float:
        return 0.0


class LeaseSemaphore:
    """At most `limit` leases per backend across all workers; a lease expires if its holder dies."""

    def __init__(self, redis: Redis, keys: Keys, control: Redis | None = None) -> None:
        self._redis = redis
        self._control = redis if control is None else control  # where the released channel is published
        self._keys = keys
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)

    @staticmethod
    def new_lease() -> str:
        return uuid.uuid4().hex

    async def try_acquire(self, server: str, limit: int, lease: str, lease_seconds: float) -> float | None:
        """Take a lease (None), or say how many seconds until the oldest lease expires."""
        ok, expires_in = await self._acquire(
            keys=[self._keys.leases(server)], args=[limit, lease, round(lease_seconds * 1000)]
        )
        return None if int(ok) else max(0.0, int(expires_in) / 1000)

    async def release(self, server: str, lease: str) -> None:
        # Published on the control plane, where the listeners are (the leases may sit on a cluster node).
        if int(await self._release(keys=[self._keys.leases(server)], args=[lease])):
            await self._control.publish(self._keys.released_channel, server)

    async def in_use(self, server: str) -> int:
        """Leases held now (unexpired)."""
        return int(await self._redis.zcount(self._keys.leases(server), time.time() * 1000, "+inf"))


class LocalLeaseSemaphore:
    """Leases counted in this process only: a per-process cap (for comparison and tests, like LocalRateLimiter)."""

    def __init__(self) -> None:
        self._held: dict[str, set[str]] = {}

    new_lease = staticmethod(LeaseSemaphore.new_lease)

    async def try_acquire(self, server: str, limit: int, lease: str, lease_seconds: float) -> float | None:
        held = self._held.setdefault(server, set())
        if len(held) < limit:
            held.add(lease)
            return None
        return 0.01  # no release channel here: the waiter looks again shortly

    async def release(self, server: str, lease: str) -> None:
        self._held.get(server, set()).discard(lease)

    async def in_use(self, server: str) -> int:
        return len(self._held.get(server, ()))
