"""A submit's ceilings and its reservation under them: the service's unfinished items
(MCP_BATCH_MAX_UNFINISHED_ITEMS), the tenant's (its key's `max_unfinished_items`) and the tenant's stored bytes are
each checked and reserved in one atomic script, so concurrent submits never pass a ceiling together. The three
live on different slots (the service's count on the control plane, the tenant's under its tag), so a submit is three
steps: the control plane (the service's count, the shard jobs' index entries, the deadline and the webhook's
fallback) and the tenant's slot (its count and bytes, its list and metadata indexes) together, then the batch's slot
(its calls, its meta, which makes it exist, and its jobs' leases). Where they are all on one node, the three and the
jobs' queueing are one script (chain.py, Submits.create). A refusal or failure undoes what the steps reserved. A
crash between steps leaves only what cleans itself: index entries that name no lease, deadline, webhook or listed
batch of a batch that does not exist (their consumers drop them), and counts a little high (a ceiling met early,
never passed).

The stored bytes cost the same whatever the number of the tenant's living batches: a counter of the tenant's bytes, a
hash of each batch's bytes, and a sorted set of when each batch's bytes are released, on the tenant's node's clock:
the moment its keys would expire (they live LIVE_TTL_SECONDS past the last sign of life until the batch ends, then
its retention). Renewing or ending a batch moves its release time with its keys' TTL (ending.py); each submit
releases the bytes of at most `_SWEEP` batches whose time has come (more when that is what keeps it under the
ceiling), which is more than any submit adds, so the backlog never grows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mcp_batch.errors import Backpressure, StoredBytesCeiling, TenantBackpressure
from mcp_batch.keys import Keys
from mcp_batch.store.hash_tables import TABLE_FIELD, TABLE_OVER

_SWEEP = 64  # released batches a submit drops from the tenant's count
_MORE = 1_024  # and how many more before it refuses a batch over the ceiling
_UNPACK = 1_000  # values one Lua unpack() hands a command (even: the ids' pairs stay whole; Lua's stack holds 8,000)

# The control plane's step. KEYS: 1 unfinished, 2 jobs, 3 deadlines, 4 webhooks.
# ARGV: 1 batch id, 2 calls, 3 service ceiling, 4 lease ms, 5 deadline (ms, '' none), 6 ms until the webhook's
# fallback ('' no webhook), then the shard jobs. Returns {0} (reserved) or {1, unfinished} (refused).
CONTROL_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[2])
local all = tonumber(redis.call('GET', KEYS[1]) or '0')
if all + n > tonumber(ARGV[3]) then return {1, all} end
redis.call('INCRBY', KEYS[1], n)
for i = 7, #ARGV do redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[i]) end
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1]) end
if ARGV[6] ~= '' then redis.call('ZADD', KEYS[4], 'NX', now + tonumber(ARGV[6]), ARGV[1]) end
return {0}
"""

# The tenant's step. KEYS: 1 tenant unfinished, 2 tenant batches, 3 stored bytes, 4 stored sizes, 5 stored until,
# then the tenant's index of each of the batch's metadata pairs (scored as the tenant's batches).
# ARGV: 1 batch id, 2 calls, 3 tenant ceiling ('' none), 4 bytes, 5 bytes ceiling ('' none), 6 live ms, 7 created µs.
# Returns {0} (reserved), or a refusal: {2, the tenant's unfinished}, {3, its bytes}.
TENANT_ADMIT = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function release(most)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, most)
  if #gone == 0 then return 0 end
  local freed = 0
  for _, size in ipairs(redis.call('HMGET', KEYS[4], unpack(gone))) do freed = freed + (tonumber(size) or 0) end
  redis.call('HDEL', KEYS[4], unpack(gone))
  redis.call('ZREM', KEYS[5], unpack(gone))
  redis.call('DECRBY', KEYS[3], freed)
  return #gone
end
local n, size = tonumber(ARGV[2]), tonumber(ARGV[4])
local mine = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[3] ~= '' and mine + n > tonumber(ARGV[3]) then return {{2, mine}} end
local swept = release({_SWEEP})
local stored = tonumber(redis.call('GET', KEYS[3]) or '0')
if ARGV[5] ~= '' and stored + size > tonumber(ARGV[5]) then
  if swept == {_SWEEP} then
    release({_MORE})
    stored = tonumber(redis.call('GET', KEYS[3]) or '0')
  end
  if stored + size > tonumber(ARGV[5]) then return {{3, stored}} end
end
redis.call('INCRBY', KEYS[1], n)
redis.call('ZADD', KEYS[2], ARGV[7], ARGV[1])
for i = 6, #KEYS do redis.call('ZADD', KEYS[i], ARGV[7], ARGV[1]) end
redis.call('INCRBY', KEYS[3], size)
redis.call('HSET', KEYS[4], ARGV[1], size)
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[6]), ARGV[1])
return {{0}}
"""

# The batch's step: its calls and ids (unless staged ahead), its meta, which makes it exist, and its jobs' leases, in
# one script (atomic on a cluster's node as on a standalone Redis; EVALSHA, so a small batch's step sends no script).
# KEYS: 1 meta, 2 calls, 3 ids. ARGV: 1 live ms, 2 lease ms, 3 number of shard jobs, then the jobs, then the number
# of calls written here, their specs, their ids' fields (id, index, ...), then the meta hash's fields and values.
# A large ids hash is made a hash table before its fields go in (hash_tables.py).
BATCH_ADMIT = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local jobs = tonumber(ARGV[3])
local n = tonumber(ARGV[4 + jobs])
local specs, ids = 5 + jobs, 5 + jobs + n
local meta = ids + 2 * n
for s = specs, ids - 1, {_UNPACK} do
  redis.call('RPUSH', KEYS[2], unpack(ARGV, s, math.min(s + {_UNPACK - 1}, ids - 1)))
end
if n > {TABLE_OVER} then redis.call('HSET', KEYS[3], '{TABLE_FIELD}', '') end
for s = ids, meta - 1, {_UNPACK} do
  redis.call('HSET', KEYS[3], unpack(ARGV, s, math.min(s + {_UNPACK - 1}, meta - 1)))
end
if n > {TABLE_OVER} then redis.call('HDEL', KEYS[3], '{TABLE_FIELD}') end
redis.call('HSET', KEYS[1], unpack(ARGV, meta))
for i = 4, 3 + jobs do redis.call('HSET', KEYS[1], 'lease:' .. ARGV[i], now + tonumber(ARGV[2])) end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1])) end
return 0
"""


def control_keys(keys: Keys) -> list[str]:
    return [keys.unfinished, keys.jobs, keys.deadlines, keys.webhooks]


def metadata_indexes(keys: Keys, tenant: str, metadata: Mapping[str, str] | None) -> list[str]:
    """The tenant's index of each of a batch's metadata pairs (on the tenant's slot)."""
    return [keys.tenant_metadata(tenant, key, value) for key, value in (metadata or {}).items()]


def tenant_keys(keys: Keys, tenant: str, metadata: Mapping[str, str] | None = None) -> list[str]:
    return [
        keys.tenant_unfinished(tenant),
        keys.tenant_batches(tenant),
        keys.tenant_stored_bytes(tenant),
        keys.tenant_stored_sizes(tenant),
        keys.tenant_stored_until(tenant),
        *metadata_indexes(keys, tenant, metadata),
    ]


def _opt(value: int | None) -> int | str:
    return "" if value is None else value


def control_args(
    batch_id: str,
    calls: int,
    ceiling: int,
    lease_ms: int,
    deadline_ms: int | None,
    webhook_ms: int | None,
    jobs: list[str],
) -> list[Any]:
    return [batch_id, calls, ceiling, lease_ms, _opt(deadline_ms), _opt(webhook_ms), *jobs]


def tenant_args(
    batch_id: str,
    calls: int,
    ceiling: int | None,
    stored: int,
    stored_ceiling: int | None,
    live_ms: int,
    created_us: int,
) -> list[Any]:
    return [batch_id, calls, _opt(ceiling), stored, _opt(stored_ceiling), live_ms, created_us]


def batch_admit_call(
    keys: Keys,
    batch_id: str,
    timing: tuple[int, int],
    jobs: list[str],
    fields: Mapping[str, Any],
    calls: tuple[list[bytes], list[bytes]] = ([], []),
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of the batch's step (`timing`: live ms, lease ms; `calls`: the specs and the ids' fields to write
    with it, none for a batch staged ahead)."""
    specs, ids = calls
    pairs = [part for name, value in fields.items() for part in (name, value)]
    argv = [*timing, len(jobs), *jobs, len(specs), *specs, *ids, *pairs]
    return [keys.batch(batch_id), keys.calls(batch_id), keys.ids(batch_id)], argv


async def undo_control(control: Redis, keys: Keys, batch_id: str, calls: int, jobs: list[str]) -> None:
    """Take back the control plane's step of a batch that was not stored."""
    async with control.pipeline(transaction=True) as pipe:
        pipe.decrby(keys.unfinished, calls)
        if jobs:
            pipe.zrem(keys.jobs, *jobs)
        pipe.zrem(keys.deadlines, batch_id)
        pipe.zrem(keys.webhooks, batch_id)
        await pipe.execute()


def queue_undo_tenant(
    pipe: Pipeline,
    keys: Keys,
    tenant: str,
    batch_id: str,
    counted: tuple[int | None, int | None],
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Queue the taking back of the tenant's step (`counted`: the calls and bytes it counted; None: nothing)."""
    calls, size = counted
    if calls is not None:
        pipe.decrby(keys.tenant_unfinished(tenant), calls)
        pipe.zrem(keys.tenant_batches(tenant), batch_id)
        for index in metadata_indexes(keys, tenant, metadata):
            pipe.zrem(index, batch_id)
    if size is not None:  # its bytes are released now, not when it would expire
        pipe.decrby(keys.tenant_stored_bytes(tenant), size)
        pipe.hdel(keys.tenant_stored_sizes(tenant), batch_id)
        pipe.zrem(keys.tenant_stored_until(tenant), batch_id)


def check_admitted(
    reply: list[int], stored: int, ceilings: tuple[int, int | None, int | None], retry_after: int
) -> None:
    """Raise the refusal a step answered (Backpressure, StoredBytesCeiling), if any."""
    why = int(reply[0])
    if why == 0:
        return
    service, tenant, stored_ceiling = ceilings
    count = int(reply[1])
    if why == 1:
        raise Backpressure(count, service, retry_after)
    if why == 2:
        assert tenant is not None
        raise TenantBackpressure(count, tenant, retry_after)
    assert stored_ceiling is not None
    raise StoredBytesCeiling(count, stored, stored_ceiling, retry_after)
