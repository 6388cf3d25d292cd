"""Priority within a tenant's own share of a rate-limited backend, across every worker: one hash per backend and
tenant (`Keys.priority`).

Each running shard job of a `high` or `normal` batch holds a field `job:{rank}:{job}` there, renewed with its lease
and removed when it ends (one of a dead worker lapses by its time). A call of a lower rank asks for its turn first:
while a higher rank runs, its rank may start only one call per interval of `MIN_SHARE` of the tenant's rate (a GCRA
bucket of its own in the same hash), then it takes its rate slot as every call does. So the higher rank gets the rest
of the rate, and a lower rank still gets its minimum share and never starves. With no higher rank running, nothing
is held back. The backend's and the tenant's buckets are not touched: other tenants' shares stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from redis.asyncio import Redis

from mcp_batch.backends.servers_file import RateLimit
from mcp_batch.keys import Keys
from mcp_batch.models import Priority

RANK = {Priority.high: 0, Priority.normal: 1, Priority.low: 2}
MIN_SHARE = 0.1  # of the tenant's rate, what a rank keeps while a higher one runs (each rank below the highest)

# KEYS: the priority hash. ARGV: rank, interval µs (the rank's minimum share), the furthest slot to book (µs).
# Returns {2, 0}: no higher rank runs; {1, wait µs}: a turn booked `wait` from now; {0, wait µs}: the next turn is
# further than that, not booked (ask again later). Lapsed jobs' fields are dropped as they are met.
_TURN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now / 1000)
local rank = tonumber(ARGV[1])
local above, gone = false, {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 4) == 'job:' then
    if tonumber(all[i + 1]) < now_ms then gone[#gone + 1] = f
    elseif tonumber(string.sub(f, 5, 5)) < rank then above = true end
  end
end
if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
if not above then return {2, '0'} end
local field = 'tat:' .. ARGV[1]
local tat = tonumber(redis.call('HGET', KEYS[1], field) or now)
if tat < now then tat = now end
local wait = tat - now
if wait > tonumber(ARGV[3]) then return {0, string.format('%.0f', wait)} end
redis.call('HSET', KEYS[1], field, string.format('%.0f', tat + tonumber(ARGV[2])))
return {1, string.format('%.0f', wait)}
"""

# KEYS: the priority hash of one of the batch's backends. ARGV: the job's field, how long it holds (ms).
_HOLD = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  redis.call('HSET', key, ARGV[1], until_)
  redis.call('PEXPIRE', key, tonumber(ARGV[2]) + 60000)
end
return 1
"""

_US = 1_000_000


@dataclass(frozen=True)
class Turn:
    """The answer of `turn`: `clear` (no higher rank runs: go on), else a turn `wait` seconds away, booked or not."""

    clear: bool
    booked: bool = False
    wait: float = 0.0


def rate_of(limit: RateLimit) -> float:
    """Calls per second a rate limit allows on average (its tighter bucket)."""
    return min(r for r in (limit.per_second, (limit.per_minute or 0) / 60 or None) if r)


class Priorities:
    """Which ranks run on each backend for each tenant, and the turns of the ranks below."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis = redis
        self._keys = keys
        self._turn = redis.register_script(_TURN)
        self._hold = redis.register_script(_HOLD)

    @staticmethod
    def _field(priority: Priority, job: str) -> str:
        return f"job:{RANK[priority]}:{job}"

    async def hold(self, servers: Iterable[str], tenant: str, priority: Priority, job: str, seconds: float) -> None:
        """Say that `job` of this rank runs on `servers` for the next `seconds` (renewed as its lease is)."""
        args: list[str | int] = [self._field(priority, job), round(seconds * 1000)]
        for server in servers:  # one script per backend: each backend's hash is on its own cluster slot
            await self._hold(keys=[self._keys.priority(server, tenant)], args=args)

    async def release(self, servers: Iterable[str], tenant: str, priority: Priority, job: str) -> None:
        """`job` has ended: the ranks below it are no longer held back for it."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for server in servers:
                pipe.hdel(self._keys.priority(server, tenant), self._field(priority, job))
            await pipe.execute()

    async def turn(self, server: str, tenant: str, priority: Priority, limit: RateLimit, horizon: float) -> Turn:
        """A call of `priority` asks for its turn on `server` (`limit`: the tenant's rate of it); a turn further
        than `horizon` seconds is not booked."""
        interval = round(_US / (rate_of(limit) * MIN_SHARE))
        state, wait = await self._turn(
            keys=[self._keys.priority(server, tenant)], args=[RANK[priority], interval, round(horizon * _US)]
        )
        return Turn(clear=int(state) == 2, booked=int(state) == 1, wait=int(wait) / _US)
