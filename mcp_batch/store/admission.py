"""A submit's ceilings and its reservation under them, in one script: the service's unfinished items
(MCP_BATCH_MAX_UNFINISHED_ITEMS), the tenant's (its key's `max_unfinished_items`) and the tenant's stored bytes are
checked, and the batch written, counted and recorded, in one atomic step, so concurrent submits never pass a ceiling
together. It runs last in the MULTI that writes the batch's calls (or after they were staged, for a large batch);
a refused batch's calls are removed by it, so a refusal leaves nothing.

The stored bytes cost the same whatever the number of the tenant's living batches: a counter of the tenant's bytes, a
hash of each batch's bytes, and a sorted set of when each batch's bytes are released, on Redis's clock: the moment its
keys would expire (they live LIVE_TTL_SECONDS past the last sign of life until the batch ends, then its retention).
The scripts that renew or end a batch move its release time with its keys' TTL (scripts.py); each submit releases the
bytes of at most `_SWEEP` batches whose time has come (more when that is what keeps it under the ceiling), which is
more than any submit adds, so the backlog never grows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.asyncio.client import Pipeline
from redis.commands.core import AsyncScript

from mcp_batch.errors import Backpressure, StoredBytesCeiling
from mcp_batch.keys import Keys

_SWEEP = 64  # released batches a submit drops from the tenant's count
_MORE = 1_024  # and how many more before it refuses a batch over the ceiling

# KEYS: 1 meta, 2 calls, 3 ids, 4 unfinished, 5 tenant unfinished, 6 tenant batches, 7 tenant stored bytes,
#       8 tenant stored sizes, 9 tenant stored until, 10 jobs, 11 deadlines, then the tenant's index of each of the
#       batch's metadata pairs (scored as the tenant's batches).
# ARGV: 1 batch id, 2 calls, 3 service ceiling, 4 tenant ceiling ('' none), 5 bytes, 6 bytes ceiling ('' none),
#       7 live ms, 8 lease ms, 9 created (µs), 10 deadline (ms, '' none), 11 number of shard jobs, then the jobs, then
#       the meta hash's fields and values.
# Returns {0} (stored), or a refusal: {1, unfinished} (the service's), {2, the tenant's unfinished}, {3, its bytes}.
ADMIT = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function release(most)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now, 'LIMIT', 0, most)
  if #gone == 0 then return 0 end
  local freed = 0
  for _, size in ipairs(redis.call('HMGET', KEYS[8], unpack(gone))) do freed = freed + (tonumber(size) or 0) end
  redis.call('HDEL', KEYS[8], unpack(gone))
  redis.call('ZREM', KEYS[9], unpack(gone))
  redis.call('DECRBY', KEYS[7], freed)
  return #gone
end
local function refuse(why, count)
  redis.call('DEL', KEYS[2], KEYS[3])
  return {{why, count}}
end
local n, size = tonumber(ARGV[2]), tonumber(ARGV[5])
local all = tonumber(redis.call('GET', KEYS[4]) or '0')
if all + n > tonumber(ARGV[3]) then return refuse(1, all) end
local mine = tonumber(redis.call('GET', KEYS[5]) or '0')
if ARGV[4] ~= '' and mine + n > tonumber(ARGV[4]) then return refuse(2, mine) end
local swept = release({_SWEEP})
local stored = tonumber(redis.call('GET', KEYS[7]) or '0')
if ARGV[6] ~= '' and stored + size > tonumber(ARGV[6]) then
  if swept == {_SWEEP} then
    release({_MORE})
    stored = tonumber(redis.call('GET', KEYS[7]) or '0')
  end
  if stored + size > tonumber(ARGV[6]) then return refuse(3, stored) end
end
local live, jobs = tonumber(ARGV[7]), tonumber(ARGV[11])
redis.call('HSET', KEYS[1], unpack(ARGV, 12 + jobs))
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], live) end
redis.call('INCRBY', KEYS[4], n)
redis.call('INCRBY', KEYS[5], n)
redis.call('ZADD', KEYS[6], ARGV[9], ARGV[1])
for i = 12, #KEYS do redis.call('ZADD', KEYS[i], ARGV[9], ARGV[1]) end
redis.call('INCRBY', KEYS[7], size)
redis.call('HSET', KEYS[8], ARGV[1], size)
redis.call('ZADD', KEYS[9], now + live, ARGV[1])
for i = 12, 11 + jobs do redis.call('ZADD', KEYS[10], now + tonumber(ARGV[8]), ARGV[i]) end
if ARGV[10] ~= '' then redis.call('ZADD', KEYS[11], ARGV[10], ARGV[1]) end
return {{0}}
"""


def admit_keys(keys: Keys, batch_id: str, tenant: str, metadata: Mapping[str, str] | None = None) -> list[str]:
    indexes = [keys.tenant_metadata(tenant, key, value) for key, value in (metadata or {}).items()]
    return [
        keys.batch(batch_id),
        keys.calls(batch_id),
        keys.ids(batch_id),
        keys.unfinished,
        keys.tenant_unfinished(tenant),
        keys.tenant_batches(tenant),
        keys.tenant_stored_bytes(tenant),
        keys.tenant_stored_sizes(tenant),
        keys.tenant_stored_until(tenant),
        keys.jobs,
        keys.deadlines,
        *indexes,
    ]


async def queue_admit(
    script: AsyncScript,
    pipe: Pipeline,
    keys: list[str],
    *,
    batch_id: str,
    calls: int,
    stored: int,
    ceilings: tuple[int, int | None, int | None],
    timing: tuple[int, int, int, int | None],
    jobs: list[str],
    fields: Mapping[str, Any],
) -> None:
    """Queue the script on `pipe`. `ceilings`: the service's unfinished items, the tenant's (None: none) and its
    stored bytes (None: counted, not capped); `timing`: live ms, lease ms, created µs, deadline ms (None: none)."""
    service, tenant, stored_ceiling = ceilings
    live_ms, lease_ms, created_us, deadline_ms = timing
    pairs = [part for name, value in fields.items() for part in (name, value)]
    args: list[Any] = [batch_id, calls, service, _opt(tenant), stored, _opt(stored_ceiling)]
    args += [live_ms, lease_ms, created_us, _opt(deadline_ms), len(jobs), *jobs, *pairs]
    await script(keys=keys, args=args, client=pipe)  # on a pipeline: queued, and loaded before the MULTI runs


def _opt(value: int | None) -> int | str:
    return "" if value is None else value


def check_admitted(
    reply: list[int], stored: int, ceilings: tuple[int, int | None, int | None], retry_after: int
) -> None:
    """Raise the refusal the script answered (Backpressure, StoredBytesCeiling), if any."""
    why = int(reply[0])
    if why == 0:
        return
    service, tenant, stored_ceiling = ceilings
    count = int(reply[1])
    if why == 1:
        raise Backpressure(count, service, retry_after)
    if why == 2:
        assert tenant is not None
        raise Backpressure(count, tenant, retry_after)
    assert stored_ceiling is not None
    raise StoredBytesCeiling(count, stored, stored_ceiling, retry_after)
