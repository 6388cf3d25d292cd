"""What a batch's end and a lease renewal change outside the batch's own slot, and where that is done.

A batch's end also changes keys elsewhere: the service's unfinished count and the webhook queue and the done channel
(control plane), its tenant's unfinished count and stored bytes' release time (the tenant's slot), and its
Idempotency-Key's expiry (that key's slot). When both planes are one Redis (standalone or Sentinel-managed, no
data-plane URL), every key is on one node: each script that may end a batch runs in the form that makes those changes
itself (`EndingScript.here`, picked by `Ending.script`), and a lease renewal takes its finished items off the counts
in its own script (`ONE_NODE_RENEW`). Nothing is then left between two steps for a DELETE, a crash or a race to
strand. Where the keys are on other slots or another Redis (a cluster's data plane, or a separate control plane), no
script can touch them all: the end leaves them in the batch's `settle` field, and `settle` takes it (once, in one
script) and applies it, control plane first. Taking it first makes every failure one-sided: a crash after the take
leaves a count high (a ceiling met a little early; the repair pass, repair.py, brings it down), a webhook due at its
fallback time (admission.py queues one at submit) and a key living its live TTL; never a count low, a webhook sent
twice, or a batch's state half-ended. A DELETE between an end and its settle takes the field with the hash and
applies it (deletion.py).
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from mcp_batch.keys import WEBHOOK_DUE, Keys
from mcp_batch.store.scripts import RENEW_STEP, SETTLE, TENANT_PART, EndingScript, batch_keys, end_keys

# KEYS: 1 the tenant's stored-until zset, 2 its unfinished count. ARGV: 1 batch id, 2 ms until its bytes are
# released, 3 items to subtract.
_TENANT = TENANT_PART + "tenant_part(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))\nreturn 1\n"

# A lease renewal with its share of the counts in the same script, on one node: a crash cannot come between them.
# KEYS: the batch keys. ARGV: RENEW's, then 4 the batch id, 5 the unfinished count (named here, not in KEYS: the
# renewal refreshes the TTL of every key it is given). Returns RENEW's reply with nothing left for the caller to apply.
ONE_NODE_RENEW = (
    RENEW_STEP
    + TENANT_PART
    + """
if due > 0 then redis.call('DECRBY', ARGV[5], due) end
tenant_part(m[5] or '', m[4] or '', ARGV[4], tonumber(ARGV[3]), due)
return {1, 0, '', ''}
"""
)


class Ending:
    """Where a batch's end, and a renewal's finished items, reach the keys of other slots: in the batch's own scripts
    on one node (`script`, `batch_keys`), else in a second step (`settle`, `count_down`)."""

    def __init__(self, redis: Redis, control: Redis, keys: Keys) -> None:
        self.redis = redis
        self.control = control
        self.keys = keys
        self._settle = redis.register_script(SETTLE)
        self._tenant = redis.register_script(_TENANT)
        self.one_node = redis is control  # both planes one Redis: every key on one node, so one script per step

    def script(self, ending: EndingScript) -> AsyncScript:
        """The form of a script that may end a batch that suits these clients (run it with `batch_keys`)."""
        return self.redis.register_script(ending.here if self.one_node else ending.later)

    def batch_keys(self, batch_id: str) -> list[str]:
        """KEYS of the form `script` picked: the batch's own, then on one node what its end changes elsewhere."""
        own = batch_keys(self.keys, batch_id)
        return [*own, *end_keys(self.keys)] if self.one_node else own

    async def ended(self, batch_id: str) -> None:
        """After a script (of the form `script` picked) that may have ended the batch: apply what its end left, where
        the script could not (nothing on one node, or when it did not end)."""
        if not self.one_node:
            await self.settle(batch_id)

    async def settle(self, batch_id: str) -> None:
        """Take and apply what an end left in the batch's `settle` field (nothing when there is none)."""
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
            if webhook == "1":  # the webhook senders wake on this alone (scripts.py)
                pipe.publish(self.keys.done_channel, WEBHOOK_DUE)
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
