"""The store's Lua scripts: every change of a batch's state is one atomic script.

The batch scripts take the same KEYS (`Keys.batch_keys`: one batch's keys, one cluster slot, nothing shared) and
start their ARGV with the same two values (now in epoch seconds, the batch id), so they share `finalize`: the one
place a batch ends (status, retention). What an end changes outside the batch's slot (the unfinished counts, the
webhook queue, the done message, the Idempotency-Key's and stored bytes' expiry) is left in its `settle` field for
ending.py to apply after the script. A shard job's lease is the batch's `lease:<job>` field, scored on the node's own
clock (TIME), so workers on machines with skewed clocks agree on when a lease has lapsed.

A batch's `halt` field says why nothing more is claimed: `stop` (on_error=stop), `cancel` or `expire`; the items
never run then take the matching status (skipped, cancelled, expired), and the batch ends once nothing is in flight.
"""

from __future__ import annotations

import time
from typing import Any

from mcp_batch.keys import Keys
from mcp_batch.models import FAILED_ITEM, TERMINAL_BATCH


def batch_keys(keys: Keys, batch_id: str) -> list[str]:
    """KEYS of the batch scripts: the batch's own keys (one slot)."""
    return keys.batch_keys(batch_id)


def batch_args(batch_id: str) -> list[Any]:
    """The first ARGV of the batch scripts."""
    return [repr(time.time()), batch_id]


# The terminal statuses as a Lua set, from the one Python definition.
_TERMINAL = "{" + ", ".join(f"{status.value} = true" for status in sorted(TERMINAL_BATCH)) + "}"

# The failed item statuses (a record of one is added to the batch's `failed` set) as a Lua set.
_FAILED = "{" + ", ".join(f"{status.value} = true" for status in sorted(FAILED_ITEM)) + "}"

# KEYS: 1 meta, 2 calls, 3 results, 4 failed, 5 finished, 6 ids, 7 inflight, 8 orphans.
# ARGV: 1 now, 2 batch id, then each script's own.
# The meta hash names three keys on other slots, which ending.py updates when the batch ends: `idempotency_key` (the
# batch's own, expires with it), `tenant_unfinished` (its tenant's count of unfinished items) and `tenant_stored`
# (when its tenant's stored bytes of it are released: moved with its keys' TTL, see admission.py).
TERMINAL_SET = f"""
local TERMINAL = {_TERMINAL}
"""
_COMMON = (
    TERMINAL_SET
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
  -- items were subtracted one by one). `settle` hands it to ending.py, which takes it once: a crash before it runs
  -- leaves the counts high (a ceiling met early), never low.
  local left = tonumber(m[1]) - tonumber(m[4] or m[2])
  redis.call('HSET', KEYS[1], 'status', final, 'finished_at', ARGV[1], 'counted', m[1], 'settle', left)
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
  return final
end
"""
)

# Finish items (each recorded once, with its seq) and claim up to `want` more: orphans first, then the cursor, whose
# specs come in one LRANGE. Per call, not per item: one HMGET and one HSET of the batch hash (its counters, `n:` per
# status included), one HDEL and one HSET of the in-flight hash, one HSET of the results (an HMGET of them before it
# only when a finished item was no longer in flight: it may be recorded already), one RPUSH of the finish order.
# TTLs are refreshed on lease renewal (RENEW), and here only when a key is created (or every 64th claim); the shared
# unfinished counts are brought up to date on renewal and at the end (`counted`).
# What Redis's Lua costs here is mostly making strings (each one hashed whole as it is made) and converting numbers:
# each record comes as its own argument, made into the stored value once (with its seq), the finished items'
# indexes go to HDEL and RPUSH straight from ARGV, and integers reach redis.call as strings made by %d (a number
# argument is printed with %.17g, several times slower). Tables are made with room for what a call puts in them (a
# constructor of nils): one grown an entry at a time is rehashed at each power of two.
# ARGV: 3 job, 4 ttl ms, 5 want, 6 n, the number of finished items, 7 claims given back unrun, `index:flag` comma
#       separated (they become orphans again, flag kept), 8 `busy waiting free`: the job's lanes with a call
#       (checks, gate or backend), those waiting for a claim, and how many of this call's claims it may start before
#       its next call ('' when the caller does not say), 9 the claims it holds unsent until its next call (comma
#       separated); then per finished item, in order: n indexes, n statuses, n records without their closing brace
#       (the script adds `,"seq":N}`); then the item id of each failed item (FAILED), in order.
# The job's lease is read with the batch hash (its `lease:<job>` field), so the check costs no command of its own.
# A new batch hash begins with the fields read and written here (batch_row.new_row): while small, Redis keeps it as
# one list that it scans from its head for each field.
# The job's `busy:<job>` (its calls running as of its last call here: the lanes busy and those this call feeds) and
# `held:<job>` (ARGV 9 and this call's claims past `free`) are kept in the batch hash while it holds its lease:
# readers count the one running and the other pending, and a take-over sends the held ones on as never dispatched.
# Returns {state, final, then the claims}: state 1 (more may come), 0 (nothing more to claim: done, halted or ended;
# `final` is the status when this call ended the batch), -2 (the batch is gone), -3 (this job's lease was taken
# over). With state 1 and `want` > 0, the claims follow: the number of orphans claimed, index, spec and flag of each,
# then the cursor's first index and the specs from it on (flag 0), straight from LRANGE.
ADVANCE = (
    _COMMON
    + f"""
local FAILED = {_FAILED}
"""
    + """
local job, ttl, want, n = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local int = string.format  -- int('%d', n): a number as Redis reads it, cheaper than redis.call's own conversion
local fields = {'status', 'total', 'claimed', 'finished', 'halt', 'deadline_at', 'on_error', 'orphans', 'lease:' .. job,
  nil, nil, nil, nil, nil, nil, nil}
local slot = {}
for i = 10 + n, 9 + 2 * n do
  local st = ARGV[i]
  if not slot[st] then
    fields[#fields + 1] = 'n:' .. st
    slot[st] = #fields
  end
end
local m = redis.call('HMGET', KEYS[1], unpack(fields))
if not m[1] then return {-2, ''} end
if TERMINAL[m[1]] then return {0, ''} end
local claimed, finished, halt, orphans = tonumber(m[3]), tonumber(m[4]), m[5], tonumber(m[8])
local total = tonumber(m[2])
local set = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
local failures = 9 + 3 * n
local busy, waiting, free = string.match(ARGV[8], '(%d+) (%d+) (%d+)')
busy, waiting, free = tonumber(busy), tonumber(waiting), tonumber(free)
local function mark(fed)  -- the job's running and held claims, while its lease is its own (if it told them)
  if not busy or not m[9] then return end
  set[#set + 1] = 'busy:' .. job; set[#set + 1] = int('%d', busy + math.min(waiting, fed))
  set[#set + 1] = 'held:' .. job; set[#set + 1] = ARGV[9]
end
local pushed = nil  -- the items recorded, once one was not (recorded already): until then, all of them
-- An item in flight has no record: recording one takes it out of flight, and one recorded is never claimed again.
-- So when all n were in flight, none is recorded or repeated; else the results hash says which are.
local out_of_flight = n > 0 and redis.call('HDEL', KEYS[7], unpack(ARGV, 10, 9 + n)) < n
local none = {}
local got, seen = none, nil
if out_of_flight then got, seen = redis.call('HMGET', KEYS[3], unpack(ARGV, 10, 9 + n)), {} end
local rows = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
for i = 1, n do
  local index, st, id = ARGV[9 + i], ARGV[9 + n + i], nil
  if FAILED[st] then
    failures = failures + 1
    id = ARGV[failures]
  end
  if not got[i] and not (seen and seen[index]) then
    if seen then seen[index] = true end
    finished = finished + 1
    rows[#rows + 1] = index; rows[#rows + 1] = int('%s,"seq":%d}', ARGV[9 + 2 * n + i], finished)
    if pushed then pushed[#pushed + 1] = index end
    local s = slot[st]
    m[s] = (tonumber(m[s]) or 0) + 1
    if id then
      redis.call('ZADD', KEYS[4], index, id)
      redis.call('PEXPIRE', KEYS[4], ttl)
      if m[7] == 'stop' and not halt then
        halt = 'stop'
        set[#set + 1] = 'halt'; set[#set + 1] = halt
        set[#set + 1] = 'stopped_at'; set[#set + 1] = index
      end
    end
  elseif not pushed then
    pushed = {unpack(ARGV, 10, 8 + i)}
  end
end
if #rows > 0 then redis.call('HSET', KEYS[3], unpack(rows)) end
local recorded = pushed and #pushed or n
if recorded > 0 then
  if pushed then
    redis.call('RPUSH', KEYS[5], unpack(pushed))
  else
    redis.call('RPUSH', KEYS[5], unpack(ARGV, 10, 9 + n))
  end
  if finished == recorded then  -- the first records: the keys were just created
    redis.call('PEXPIRE', KEYS[3], ttl)
    redis.call('PEXPIRE', KEYS[5], ttl)
  end
  set[#set + 1] = 'finished'; set[#set + 1] = int('%d', finished)
  for _, k in pairs(slot) do
    if type(m[k]) == 'number' then  -- a count this call added to
      set[#set + 1] = fields[k]; set[#set + 1] = int('%d', m[k])
    end
  end
end
for entry in string.gmatch(ARGV[7], '[^,]+') do
  local o = string.sub(entry, 1, string.find(entry, ':', 1, true) - 1)
  if redis.call('HGET', KEYS[7], o) == job then
    redis.call('HDEL', KEYS[7], o)
    redis.call('RPUSH', KEYS[8], entry)
    redis.call('PEXPIRE', KEYS[8], ttl)
    orphans = (orphans or 0) + 1
    set[#set + 1] = 'orphans'; set[#set + 1] = orphans
  end
end
local function write()
  if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
end
if finished == total then
  write()
  return {0, finalize(halt)}
end
if not halt and m[6] and tonumber(ARGV[1]) >= tonumber(m[6]) then
  halt = 'expire'
  set[#set + 1] = 'halt'; set[#set + 1] = halt
end
if halt then
  mark(0)
  write()
  if redis.call('HLEN', KEYS[7]) == 0 then return {0, finalize(halt)} end
  return {0, ''}
end
if want <= 0 then
  mark(0)
  write()
  return {1, ''}
end
if not m[9] then
  write()
  return {-3, ''}
end
local taken, mine = none, {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
-- `orphans` counts entries pushed since the list was last seen empty; missing (a batch from before it) means unknown.
while want > 0 and (orphans == nil or orphans > 0) do
  local entry = redis.call('LPOP', KEYS[8])
  if not entry then
    orphans = 0
    set[#set + 1] = 'orphans'; set[#set + 1] = 0
    break
  end
  orphans = orphans - 1
  set[#set + 1] = 'orphans'; set[#set + 1] = orphans
  local sep = string.find(entry, ':', 1, true)
  local o = string.sub(entry, 1, sep - 1)
  if redis.call('HEXISTS', KEYS[3], o) == 0 and not redis.call('HGET', KEYS[7], o) then
    mine[#mine + 1] = o; mine[#mine + 1] = job
    if taken == none then taken = {} end
    taken[#taken + 1] = o
    taken[#taken + 1] = redis.call('LINDEX', KEYS[2], o)
    taken[#taken + 1] = tonumber(string.sub(entry, sep + 1))
    want = want - 1
  end
end
local first, specs = claimed, none
if want > 0 and claimed < total then
  local k = math.min(want, total - claimed)
  specs = redis.call('LRANGE', KEYS[2], int('%d', claimed), int('%d', claimed + k - 1))
  for j = 1, k do
    mine[#mine + 1] = int('%d', claimed + j - 1); mine[#mine + 1] = job
  end
  if m[1] == 'queued' then
    set[#set + 1] = 'status'; set[#set + 1] = 'running'
    set[#set + 1] = 'started_at'; set[#set + 1] = ARGV[1]
  end
  set[#set + 1] = 'claimed'; set[#set + 1] = int('%d', claimed + k)
  if math.floor((claimed + k) / 64) > math.floor(claimed / 64) or claimed == 0 then
    redis.call('HSET', KEYS[7], unpack(mine))
    mine = {}
    redis.call('PEXPIRE', KEYS[7], ttl)
  end
  claimed = claimed + k
end
if #mine > 0 then redis.call('HSET', KEYS[7], unpack(mine)) end
local orphaned = #taken / 3
if busy then
  local fed, held_now = orphaned + #specs, ARGV[9]
  for j = free + 1, fed do  -- claims beyond those the job may start before its next call: held too
    local index = j <= orphaned and taken[3 * j - 2] or int('%d', first + j - 1 - orphaned)
    held_now = held_now .. (held_now == '' and '' or ',') .. index
  end
  set[#set + 1] = 'busy:' .. job; set[#set + 1] = int('%d', busy + math.min(waiting, fed))
  set[#set + 1] = 'held:' .. job; set[#set + 1] = held_now
end
write()
if orphaned == 0 then return {1, '', 0, first, unpack(specs)} end
local out = {1, '', orphaned, unpack(taken)}
out[#out + 1] = first
for j = 1, #specs do out[#out + 1] = specs[j] end
return out
"""
)

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
TAKE_OVER = (
    _COMMON
    + """
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
CANCEL = (
    _COMMON
    + """
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
EXPIRE = (
    _COMMON
    + """
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

# Take what an end left for ending.py (once: the field goes). KEYS: 1 meta. `SETTLE_TAKEN` is the take, which
# ending.py's one-node settle starts with too: `m` the fields, `taken` whether there was anything to take.
SETTLE_TAKEN = """
local m = redis.call('HMGET', KEYS[1], 'settle', 'retention', 'idempotency_key', 'tenant_unfinished', 'tenant_stored',
  'webhook_url')
local taken = m[1] ~= false
if taken then redis.call('HDEL', KEYS[1], 'settle') end
"""
# Returns {} (nothing to settle) or {left, retention seconds, idempotency key, tenant unfinished key, tenant stored
# key, '1' when a webhook is due} ('': none).
SETTLE = (
    SETTLE_TAKEN
    + """
if not taken then return {} end
return {m[1], m[2], m[3] or '', m[4] or '', m[5] or '', m[6] and '1' or '0'}
"""
)
