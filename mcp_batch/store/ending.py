"""What a batch's end and a lease renewal change outside the batch's own slot, applied after the batch's script.

A batch's scripts touch only its slot (scripts.py). Its end also changes keys elsewhere: the service's unfinished
count and the webhook queue and the done channel (control plane), its tenant's unfinished count and stored bytes'
release time (the tenant's slot), and its Idempotency-Key's expiry (that key's slot). `finalize` leaves what they
need in the batch's `settle` field; `settle` takes it (once, in one script) and applies it, control plane first.
Taking it first makes every failure one-sided: a crash after the take leaves a count high (a ceiling met a little
early), a webhook due at its fallback time (admission.py queues one at submit) and a key living its live TTL; never a
count low, a webhook sent twice, or a batch's state half-ended. When both planes are one Redis (standalone or
Sentinel-managed, no data-plane URL), every key is on one node: one script takes the field and applies it all (one
round trip instead of three or four, nothing half-applied), and a lease renewal takes its finished items off the
counts in its own script (`ONE_NODE_RENEW`), so there a crash leaves no count high.
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.store.scripts import RENEW_STEP, SETTLE, SETTLE_TAKEN

# The tenant's slot: when its stored bytes of this batch are released (`ms` from now, on this node's clock, as the
# submit's sweep) and its unfinished count. '' names no key.
_TENANT_PART = """
local function tenant_part(stored, unfinished, id, ms, due)
  if stored ~= '' and unfinished ~= '' then
    local t = redis.call('TIME')
    redis.call('ZADD', stored, 'XX', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ms, id)
  end
  if unfinished ~= '' and due > 0 then redis.call('DECRBY', unfinished, due) end
end
"""
# KEYS: 1 the tenant's stored-until zset, 2 its unfinished count. ARGV: 1 batch id, 2 ms until its bytes are
# released, 3 items to subtract.
_TENANT = _TENANT_PART + "tenant_part(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))\nreturn 1\n"

# The whole settle on one node. KEYS: 1 meta, 2 the webhook queue, 3 the unfinished count, 4 the deadlines. ARGV: 1
# batch id, 2 the done channel. The tenant's and the Idempotency-Key's names are read from the meta hash, so they are
# not in KEYS: a script may touch keys it was not given only off a cluster, which is the only place this one runs.
_ONE_NODE = (
    SETTLE_TAKEN
    + _TENANT_PART
    + """
if not taken then return 0 end
local left, ms = tonumber(m[1]), math.floor(tonumber(m[2]) * 1000)
if m[6] then redis.call('ZADD', KEYS[2], 0, ARGV[1]) end
redis.call('DECRBY', KEYS[3], left)
redis.call('ZREM', KEYS[4], ARGV[1])
tenant_part(m[5] or '', m[4] or '', ARGV[1], ms, left)
if m[3] and m[3] ~= '' then redis.call('PEXPIRE', m[3], ms) end
redis.call('PUBLISH', ARGV[2], ARGV[1])
return 1
"""
)

# A lease renewal with its share of the counts in the same script, on one node: a crash cannot come between them.
# KEYS: the batch keys. ARGV: RENEW's, then 4 the batch id, 5 the unfinished count (named here, not in KEYS, as in
# the one-node settle). Returns RENEW's reply with nothing left for the caller to apply.
ONE_NODE_RENEW = (
    RENEW_STEP
    + _TENANT_PART
    + """
if due > 0 then redis.call('DECRBY', ARGV[5], due) end
tenant_part(m[5] or '', m[4] or '', ARGV[4], tonumber(ARGV[3]), due)
return {1, 0, '', ''}
"""
)


class Ending:
    """Applies a batch's end, and a renewal's finished items, to the keys of other slots."""

    def __init__(self, redis: Redis, control: Redis, keys: Keys) -> None:
        self.redis = redis
        self.control = control
        self.keys = keys
        self._settle = redis.register_script(SETTLE)
        self._tenant = redis.register_script(_TENANT)
        self.one_node = redis is control  # both planes one Redis: every key on one node, so one script per step
        self._one_node = redis.register_script(_ONE_NODE)

    async def settle(self, batch_id: str) -> None:
        """After a script that may have ended the batch: apply what its end left (nothing when it did not end)."""
        if self.one_node:
            keys = [self.keys.batch(batch_id), self.keys.webhooks, self.keys.unfinished, self.keys.deadlines]
            await self._one_node(keys, [batch_id, self.keys.done_channel])
            return
        reply = cast(list[Any], await self._settle([self.keys.batch(batch_id)], []))
        if not reply:
            return
        left, retention, idem, tenant_unfinished, tenant_stored, webhook = (v.decode() for v in reply)
        ms = int(float(retention) * 1000)
        async with self.control.pipeline(transaction=True) as pipe:
            if webhook == "1":
                pipe.zadd(self.keys.webhooks, {batch_id: 0})
            pipe.decrby(self.keys.unfinished, int(left))
            pipe.zrem(self.keys.deadlines, batch_id)
            pipe.publish(self.keys.done_channel, batch_id)
            await pipe.execute()
        await self.tenant(batch_id, int(left), tenant_unfinished, tenant_stored, ms)
        if idem:
            await self.redis.pexpire(idem, ms)

    async def count_down(self, batch_id: str, due: int, unfinished: str, stored: str, ttl_ms: int) -> None:
        """A renewal's share: `due` finished items off the unfinished counts, the stored bytes' release moved on."""
        if due > 0:
            await self.control.decrby(self.keys.unfinished, due)
        await self.tenant(batch_id, due, unfinished, stored, ttl_ms)

    async def tenant(self, batch_id: str, due: int, unfinished: str, stored: str, ms: int) -> None:
        """The tenant's slot: its unfinished count and when its stored bytes of this batch are released."""
        if stored and unfinished:
            await self._tenant([stored, unfinished], [batch_id, ms, due])
        elif unfinished and due > 0:  # a batch stored without the stored-bytes record
            await self.redis.decrby(unfinished, due)
