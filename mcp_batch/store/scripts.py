"""The store's Lua scripts: every change of a batch's state is one atomic script (the finish-and-claim one, the
worker's hot path, has a module of its own: advance.py).

The batch scripts take the same KEYS (`Keys.batch_keys`: one batch's keys, one cluster slot, nothing shared) and
start their ARGV with the same two values (now in epoch seconds, the batch id), so they share `finalize`: the one
place a batch ends (status, retention). An end also changes keys outside the batch's slot (the unfinished counts, the
webhook queue, the done message, the Idempotency-Key's and stored bytes' expiry). Each script that may end a batch
comes in two forms (`EndingScript`): where every key is on one node, the script applies those changes itself, in
the same script as the end; where they are on other slots or another Redis, it leaves them in the batch's `settle`
field for ending.py to apply after it. A shard job's lease is the batch's `lease:<job>` field, scored on the node's own
clock (TIME), so workers on machines with skewed clocks agree on when a lease has lapsed.

A batch's `halt` field says why nothing more is claimed: `stop` (on_error=stop), `cancel` or `expire`; the items
never run then take the matching status (skipped, cancelled, expired), and the batch ends once nothing is in flight.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mcp_batch.keys import WEBHOOK_DUE, Keys
from mcp_batch.models import TERMINAL_BATCH


def batch_keys(keys: Keys, batch_id: str) -> list[str]:
    """KEYS of the batch scripts: the batch's own keys (one slot)."""
    return keys.batch_keys(batch_id)


def batch_args(batch_id: str) -> list[Any]:
    """The first ARGV of the batch scripts."""
    return [repr(time.time()), batch_id]


# The terminal statuses as a Lua set, from the one Python definition.
_TERMINAL = "{" + ", ".join(f"{status.value} = true" for status in sorted(TERMINAL_BATCH)) + "}"

# KEYS: 1 meta, 2 calls, 3 results, 4 failed, 5 finished, 6 ids, 7 inflight, 8 orphans.
# ARGV: 1 now, 2 batch id, then each script's own.
# The meta hash names three keys on other slots, which a batch's end updates (`settle`): `idempotency_key` (the
# batch's own, expires with it), `tenant_unfinished` (its tenant's count of unfinished items) and `tenant_stored`
# (when its tenant's stored bytes of it are released: moved with its keys' TTL, see admission.py).
TERMINAL_SET = f"""
local TERMINAL = {_TERMINAL}
"""

# The tenant's slot: when its stored bytes of this batch are released (`ms` from now, on this node's clock, as the
# submit's sweep) and its unfinished count. '' names no key.
TENANT_PART = """
local function tenant_part(stored, unfinished, id, ms, due)
  if stored ~= '' and unfinished ~= '' then
    local t = redis.call('TIME')
    redis.call('ZADD', stored, 'XX', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ms, id)
  end
  if unfinished ~= '' and due > 0 then redis.call('DECRBY', unfinished, due) end
end
"""

# An end's changes outside the batch's slot, left for ending.py: what the unfinished counts still hold of the batch.
# It takes them once: a crash before it runs leaves the counts high (a ceiling met early), never low.
_SETTLE_LATER = """
local function settle(left, ms)
  redis.call('HSET', KEYS[1], 'settle', left)
end
"""

# The same changes made here, every key on one node: nothing is left for a second step, so no DELETE, crash or race
# between the two can strand a count. KEYS after the batch's 8 (`end_keys`): 9 the webhook queue, 10 the service's
# unfinished count, 11 the deadlines, 12 the done channel (a channel, given here so that no script's ARGV moves).
# The tenant's and the Idempotency-Key's names are read from the meta hash: a script may touch keys it was not given
# only off a cluster, which is the only place this form runs. A batch with a webhook is said twice on the done channel:
# its id, for whoever waits on it, then WEBHOOK_DUE, which alone wakes the workers' webhook senders.
_SETTLE_HERE = (
    TENANT_PART
    + f"""
local WEBHOOK_DUE = '{WEBHOOK_DUE}'
"""
    + """
local function settle(left, ms)
  local s = redis.call('HMGET', KEYS[1], 'idempotency_key', 'tenant_unfinished', 'tenant_stored', 'webhook_url')
  if s[4] then redis.call('ZADD', KEYS[9], 0, ARGV[2]) end
  redis.call('DECRBY', KEYS[10], left)
  redis.call('ZREM', KEYS[11], ARGV[2])
  tenant_part(s[3] or '', s[2] or '', ARGV[2], ms, left)
  if s[1] and s[1] ~= '' then redis.call('PEXPIRE', s[1], ms) end
  redis.call('PUBLISH', KEYS[12], ARGV[2])
  if s[4] then redis.call('PUBLISH', KEYS[12], WEBHOOK_DUE) end
end
"""
)


def end_keys(keys: Keys) -> list[str]:
    """The KEYS an ending script's one-node form takes after the batch's own (`_SETTLE_HERE`)."""
    return [keys.webhooks, keys.unfinished, keys.deadlines, keys.done_channel]


def _common(settle: str) -> str:
    return (
        TERMINAL_SET
        + settle
        + """
local function lease_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function finalize(halt)
  local final = 'completed'
  if halt == 'cancel' then final = 'cancelled' elseif halt == 'expire' then final = 'expired' end
  local m = redis.call('HMGET', KEYS[1], 'total', 'finished', 'retention', 'counted')
  -- What the unfinished counts still hold of this batch (`counted` missing: a batch from before it, whose finished
  -- items were subtracted one by one): settled by `settle`, after the keys' TTLs are set.
  local left = tonumber(m[1]) - tonumber(m[4] or m[2])
  redis.call('HSET', KEYS[1], 'status', final, 'finished_at', ARGV[1], 'counted', m[1])
  -- Claimed items that never finished (their worker stopped, the batch halted): named, so readers can list them.
  local orphaned, seen = {}, {}
  for _, entry in ipairs(redis.call('LRANGE', KEYS[8], 0, -1)) do
    local o = tonumber(string.sub(entry, 1, string.find(entry, ':', 1, true) - 1))
    if not seen[o] and redis.call('HEXISTS', KEYS[3], o) == 0 then
      seen[o] = true
      table.insert(orphaned, o)
    end
  end
  if #orphaned > 0 then
    table.sort(orphaned)
    redis.call('HSET', KEYS[1], 'orphaned', table.concat(orphaned, ','))
  end
  redis.call('DEL', KEYS[7], KEYS[8])
  local ms = tonumber(m[3]) * 1000
  for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ms) end
  settle(left, ms)
  return final
end
"""
    )


COMMON = _common(_SETTLE_LATER)
COMMON_HERE = _common(_SETTLE_HERE)


@dataclass(frozen=True, slots=True)
class EndingScript:
    """A batch script that may end the batch, in both forms: `later` leaves the end's changes outside the batch's slot
    in its `settle` field (a cluster's data plane, or a control plane on another Redis); `here` makes them in the same
    script (every key on one node), given `end_keys` after the batch's. ending.py's `Ending.script` picks one."""

    later: str
    here: str

    @classmethod
    def of(cls, body: str) -> EndingScript:
        return cls(COMMON + body, COMMON_HERE + body)


# Take a shard job's part back: its in-flight items become orphans, and unless the batch is ending a replacement
# job gets the lease (the caller then queues it). ARGV[6] is the mode: '0' a lapsed lease (only then; a job still
# waiting in arq's queue, not in progress, only has its lease extended: the caller read that from the control plane,
# ARGV[9] '1'), '1' a graceful hand-back, '2' a job that ran out of items: what it still holds are claims whose
# replies were lost (Redis stopped before answering), never dispatched, except those it names in ARGV[10]: claims it
# ran whose records are gone (a failover promoted a replica that the records had not reached, while the claims had:
# they were on it before the calls were sent), which go on as recovered, never as fresh; only then is a replacement
# made. ARGV: 3 job, 4 new job, 5 lease ms, 6 mode, 7 ttl ms, 8 indexes surely never dispatched (comma-separated),
# 9 queued ('1': waiting in arq's queue, not started), 10 (mode '2') the claims the job ran that a replacement must
# not send as never dispatched, `index:flag` comma-separated (flag 2: sent by this job; 1: recovered, flag kept).
# Returns {outcome, ms}: outcome 'gone' (no such lease), 'alive' (ms: until it lapses), 'queued' (ms: the new lease),
# 'released', 'done' (nothing to continue) or 'replaced'. The caller updates the control plane's index and arq's
# queue after it (leases.py says in what order).
TAKE_OVER = EndingScript.of(
    """
local now = lease_now()
local lease = 'lease:' .. ARGV[3]
local score = redis.call('HGET', KEYS[1], lease)
if not score then return {'gone', 0} end
if ARGV[6] == '0' then
  if tonumber(score) > now then return {'alive', tonumber(score) - now} end
  if ARGV[9] == '1' then
    redis.call('HSET', KEYS[1], lease, now + tonumber(ARGV[5]))
    return {'queued', tonumber(ARGV[5])}
  end
end
redis.call('HDEL', KEYS[1], lease)
local clean, ran = {}, {}
for i in string.gmatch(ARGV[8], '%d+') do clean[i] = true end
for i, flag in string.gmatch(ARGV[10] or '', '(%d+):(%d)') do ran[i] = flag end
-- Claims the job held unsent as of its last round trip never reached a backend; its marks go with it.
local mark = redis.call('HMGET', KEYS[1], 'held:' .. ARGV[3], 'busy:' .. ARGV[3])
for i in string.gmatch(mark[1] or '', '%d+') do clean[i] = true end
if mark[1] or mark[2] then redis.call('HDEL', KEYS[1], 'held:' .. ARGV[3], 'busy:' .. ARGV[3]) end
local held = redis.call('HGETALL', KEYS[7])
local moved, lost = 0, {}
local runner = redis.call('HGET', KEYS[1], 'runner:' .. ARGV[3]) or ''
for i = 1, #held, 2 do
  if held[i + 1] == ARGV[3] then
    redis.call('HDEL', KEYS[7], held[i])
    if redis.call('HEXISTS', KEYS[3], held[i]) == 0 then
      local fresh = clean[held[i]] or (ARGV[6] == '2' and not ran[held[i]])
      redis.call('RPUSH', KEYS[8], held[i] .. ':' .. (fresh and '0' or ran[held[i]] or '1'))
      redis.call('PEXPIRE', KEYS[8], tonumber(ARGV[7]))
      moved = moved + 1
      -- It may have reached its backend: the item says so, and whose it was, if it never finishes.
      if not fresh then lost[#lost + 1] = 'lost:' .. held[i]; lost[#lost + 1] = runner end
    end
  end
end
if moved > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'orphans', moved)
  if #lost > 0 then redis.call('HSET', KEYS[1], unpack(lost)) end
end
local status = redis.call('HGET', KEYS[1], 'status')
if not status or TERMINAL[status] then return {'done', 0} end
local halt = redis.call('HGET', KEYS[1], 'halt')
if halt then
  if redis.call('HLEN', KEYS[7]) == 0 then finalize(halt) end
  return {'done', 0}
end
if ARGV[6] == '2' and moved == 0 then return {'released', 0} end
redis.call('HSET', KEYS[1], 'lease:' .. ARGV[4], now + tonumber(ARGV[5]))
return {'replaced', 0}
"""
)

# Cancel: nothing more is claimed; the batch ends now if nothing is in flight, else when the last call ends.
# Returns {outcome, status}: outcome 'missing', 'finished', 'ended' or 'cancelling' (the caller publishes the cancel).
CANCEL = EndingScript.of(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing', ''} end
local status = redis.call('HGET', KEYS[1], 'status')
if TERMINAL[status] then return {'finished', status} end
redis.call('HSET', KEYS[1], 'halt', 'cancel', 'status', 'cancelling', 'cancel_requested_at', ARGV[1])
if redis.call('HLEN', KEYS[7]) == 0 then return {'ended', finalize('cancel')} end
return {'cancelling', 'cancelling'}
"""
)

# A deadline passed: nothing more is claimed; the batch ends now if nothing is in flight (the workers running
# calls cut them at the deadline themselves). Returns 'missing', a terminal status, 'early' or 'expiring'; the caller
# drops the deadline from the control plane's index when the batch is missing or over.
EXPIRE = EndingScript.of(
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'missing' end
local m = redis.call('HMGET', KEYS[1], 'status', 'deadline_at', 'halt')
if TERMINAL[m[1]] then return m[1] end
if not m[2] or tonumber(ARGV[1]) < tonumber(m[2]) then return 'early' end
local halt = m[3]
if not halt then
  halt = 'expire'
  redis.call('HSET', KEYS[1], 'halt', halt)
end
if redis.call('HLEN', KEYS[7]) == 0 then return finalize(halt) end
return 'expiring'
"""
)

# Renew a shard job's lease, keeping the batch's keys alive while it runs and taking the finished items the unfinished
# counts have not yet subtracted (ADVANCE leaves both out of the per-item path): `due`, which the caller subtracts on
# the control plane and the tenant's slot (a crash before it leaves the counts high, never low).
# KEYS: the batch keys. ARGV: job, lease ms, ttl ms. Returns {1, due, tenant unfinished key, tenant stored key} ('':
# none), or {0} when the lease was taken over (or the batch is gone). `RENEW_STEP` is all but the return, which
# ending.py's one-node renewal starts with too: `m` the fields, `due` the items taken.
RENEW_STEP = (
    TERMINAL_SET
    + """
local lease = 'lease:' .. ARGV[1]
if not redis.call('HGET', KEYS[1], lease) then return {0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], lease, now + tonumber(ARGV[2]))
local m = redis.call('HMGET', KEYS[1], 'status', 'finished', 'counted', 'tenant_unfinished', 'tenant_stored')
if not m[1] or TERMINAL[m[1]] then return {1, 0, '', ''} end
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[3])) end
local due = tonumber(m[2]) - tonumber(m[3] or m[2])
if due > 0 then redis.call('HSET', KEYS[1], 'counted', m[2]) end
"""
)
RENEW = RENEW_STEP + "return {1, due, m[4] or '', m[5] or ''}\n"

# Take what an end left for ending.py (once: the field goes). KEYS: 1 meta. Returns {} (nothing to settle) or {left,
# retention seconds, idempotency key, tenant unfinished key, tenant stored key, '1' when a webhook is due} ('': none).
SETTLE = """
local m = redis.call('HMGET', KEYS[1], 'settle', 'retention', 'idempotency_key', 'tenant_unfinished', 'tenant_stored',
  'webhook_url')
if not m[1] then return {} end
redis.call('HDEL', KEYS[1], 'settle')
return {m[1], m[2], m[3] or '', m[4] or '', m[5] or '', m[6] and '1' or '0'}
"""
