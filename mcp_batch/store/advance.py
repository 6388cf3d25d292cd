"""The finish-and-claim script that `Claims.step` runs (claims.py): the worker's hot path inside Redis, written
against what Redis's Lua costs. It takes the batch scripts' KEYS and first ARGV and ends a batch by their `finalize`
(scripts.py), in both their forms (`EndingScript`)."""

from __future__ import annotations

from mcp_batch.models import FAILED_ITEM
from mcp_batch.store.hash_tables import TABLE_FIELD, TABLE_OVER
from mcp_batch.store.scripts import EndingScript

# The failed item statuses (a record of one is added to the batch's `failed` set) as a Lua set.
_FAILED = "{" + ", ".join(f"{status.value} = true" for status in sorted(FAILED_ITEM)) + "}"

# Finish items (each recorded once, with its seq) and claim up to `want` more: orphans first, then the cursor, whose
# specs come in one LRANGE. Per call, not per item: one HMGET and one HSET of the batch hash (its counters, `n:` per
# status included), one HDEL and one HSET of the in-flight hash, one HSET of the results (an HMGET of them before it
# only when a finished item was no longer in flight: it may be recorded already), one RPUSH of the finish order. TTLs
# are refreshed on lease renewal (RENEW), and here only when a key is created (or every 64th claim, which also makes the
# in-flight hash of a batch of more than TABLE_OVER (hash_tables.py) calls a hash table, whatever it was: it may have
# emptied and come back); the shared unfinished counts are brought up to date on renewal and at the end (`counted`).
# What Redis's Lua costs here is mostly making strings (each one hashed whole as it is made) and converting numbers:
# each record comes as its own argument, stored as it came (or made anew once, with its seq: below), the finished items'
# indexes go to HDEL and RPUSH straight from ARGV, and integers reach redis.call as strings made by %d (a number
# argument is printed with %.17g, several times slower). Tables are made with room for what a call puts in them (a
# constructor of nils): one grown an entry at a time is rehashed at each power of two.
# ARGV: 3 job, 4 ttl ms, 5 want, 6 n, the number of finished items, 7 claims given back unrun, `index:flag` comma
#       separated (they become orphans again, flag kept), 8 `busy waiting free`: the job's lanes with a call
#       (checks, gate or backend), those waiting for a claim, and how many of this call's claims it may start before
#       its next call ('' when the caller does not say), 9 the claims it holds unsent until its next call (comma
#       separated), 10 the seq the caller gave the first record, the next ones following ('': records come without
#       their closing brace, and the script adds `,"seq":N}`); then per finished item, in order: n indexes, n
#       statuses, n records; then the item id of each failed item (FAILED), in order.
# A record whose seq the caller guessed right is stored as it came: making the stored value anew (a string Redis's Lua
# hashes whole) was a sixth of an item's cost here. One guessed wrong (another job recorded items in between, or one
# was recorded already) is made anew, its suffix cut.
# The job's lease is read with the batch hash (its `lease:<job>` field), so the check costs no command of its own.
# A new batch hash begins with the fields read and written here (batch_row.new_row): while small, Redis keeps it as
# one list that it scans from its head for each field.
# The job's `busy:<job>` (its calls running as of its last call here: the lanes busy and those this call feeds) and
# `held:<job>` (ARGV 9 and this call's claims past `free`) are kept in the batch hash while it holds its lease:
# readers count the one running and the other pending, and a take-over sends the held ones on as never dispatched.
# Returns {state, final, next, then the claims}: state 1 (more may come), 0 (nothing more to claim: done, halted or
# ended; `final` is the status when this call ended the batch), -2 (the batch is gone), -3 (this job's lease was taken
# over); `next`, with state 1, the seq the batch's next record takes (else 0). With state 1 and `want` > 0, the claims
# follow: the number of orphans claimed, index, spec and flag of each, then the cursor's first index and the specs
# from it on (flag 0), straight from LRANGE.
ADVANCE = EndingScript.of(
    f"""
local FAILED = {_FAILED}
local TABLE, OVER = '{TABLE_FIELD}', {TABLE_OVER}
"""
    + """
local job, ttl, want, n = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local told = tonumber(ARGV[10])  -- the seq the caller gave the first record (nil: none)
local int = string.format  -- int('%d', n): a number as Redis reads it, cheaper than redis.call's own conversion
local fields = {'status', 'total', 'claimed', 'finished', 'halt', 'deadline_at', 'on_error', 'orphans', 'lease:' .. job,
  nil, nil, nil, nil, nil, nil, nil}
local slot = {}
for i = 11 + n, 10 + 2 * n do
  local st = ARGV[i]
  if not slot[st] then
    fields[#fields + 1] = 'n:' .. st
    slot[st] = #fields
  end
end
local m = redis.call('HMGET', KEYS[1], unpack(fields))
if not m[1] then return {-2, '', 0} end
if TERMINAL[m[1]] then return {0, '', 0} end
local claimed, finished, halt, orphans = tonumber(m[3]), tonumber(m[4]), m[5], tonumber(m[8])
local total = tonumber(m[2])
local set = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
local failures = 10 + 3 * n
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
local out_of_flight = n > 0 and redis.call('HDEL', KEYS[7], unpack(ARGV, 11, 10 + n)) < n
local none = {}
local got, seen = none, nil
if out_of_flight then got, seen = redis.call('HMGET', KEYS[3], unpack(ARGV, 11, 10 + n)), {} end
local rows = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
for i = 1, n do
  local index, st, id = ARGV[10 + i], ARGV[10 + n + i], nil
  if FAILED[st] then
    failures = failures + 1
    id = ARGV[failures]
  end
  if not got[i] and not (seen and seen[index]) then
    if seen then seen[index] = true end
    finished = finished + 1
    local row = ARGV[10 + 2 * n + i]
    if not told then
      row = int('%s,"seq":%d}', row, finished)
    elseif told + i - 1 ~= finished then  -- the worker's seq was wrong: its suffix goes and the right one comes
      row = int('%s,"seq":%d}', string.sub(row, 1, -9 - #int('%d', told + i - 1)), finished)
    end
    rows[#rows + 1] = index; rows[#rows + 1] = row
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
    pushed = {unpack(ARGV, 11, 9 + i)}
  end
end
if #rows > 0 then redis.call('HSET', KEYS[3], unpack(rows)) end
local recorded = pushed and #pushed or n
if recorded > 0 then
  if pushed then
    redis.call('RPUSH', KEYS[5], unpack(pushed))
  else
    redis.call('RPUSH', KEYS[5], unpack(ARGV, 11, 10 + n))
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
-- Past its deadline the batch ends `expired`, as a read already shows it, even when these were its last items
-- (the deadline cut them, or they ended after it).
if not halt and m[6] and tonumber(ARGV[1]) >= tonumber(m[6]) then
  halt = 'expire'
  set[#set + 1] = 'halt'; set[#set + 1] = halt
end
if finished == total then
  write()
  return {0, finalize(halt), 0}
end
if halt then
  mark(0)
  write()
  if redis.call('HLEN', KEYS[7]) == 0 then return {0, finalize(halt), 0} end
  return {0, '', 0}
end
if want <= 0 then
  mark(0)
  write()
  return {1, '', finished + 1}
end
if not m[9] then
  write()
  return {-3, '', 0}
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
    if total > OVER then
      redis.call('HSET', KEYS[7], TABLE, '', unpack(mine))
      redis.call('HDEL', KEYS[7], TABLE)
    else
      redis.call('HSET', KEYS[7], unpack(mine))
    end
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
if orphaned == 0 then return {1, '', finished + 1, 0, first, unpack(specs)} end
local out = {1, '', finished + 1, orphaned, unpack(taken)}
out[#out + 1] = first
for j = 1, #specs do out[#out + 1] = specs[j] end
return out
"""
)
