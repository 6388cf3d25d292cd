"""Deleting an ended batch whole (`Store.deletion`): every key of the batch, its place in its tenant's list and in
the index of each of its metadata pairs, its Idempotency-Key's record, its stored bytes (released now, not when its
keys would have expired) and a completion webhook not yet delivered. A batch that has not ended is refused without a
change.

These live on three slots (the batch's, its tenant's, the control plane), so a delete is three steps, batch first:
one script checks that the batch has ended and deletes its keys (atomic: the batch is there whole or not at all),
then one script on the tenant's slot takes it out of the tenant's list, indexes and bytes, then its Idempotency-Key
and the control plane's webhook and deadline entries go. A crash after the first step leaves only what a batch's
expiry leaves, which cleans itself: ids in the tenant's list and indexes that a listing drops as it meets them,
bytes released when their time comes, webhook and deadline entries whose consumers find no batch, a record that
expires with its retention. The keys are named from the batch's hash (its tenant and metadata, which never change
once written), read first; the first script reads the hash again, so a batch deleted or ended in between is seen as
it is. A webhook attempt a worker has already claimed may still be sent; the next one finds the batch gone. What the
batch's end left to settle and no one has taken yet (a cancel answered between its script and its settle) is taken
with the hash and applied here (in the first script itself where every key is on one node, where only a process that
settles in steps leaves one), so the unfinished counts never keep a deleted batch's items.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch.errors import BatchNotEnded, BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH
from mcp_batch.store.admission import metadata_indexes
from mcp_batch.store.batch_row import load_metadata

_TERMINAL = "{" + ", ".join(f"{status.value} = true" for status in sorted(TERMINAL_BATCH)) + "}"

# The batch's slot. KEYS: the batch's keys (Keys.batch_keys, then its questions, answers and progress).
# Returns {'deleted', its Idempotency-Key's record ('' none), its untaken `settle` ('' none), its tenant's unfinished
# count}, {'missing'} or {'running', status}. The `settle` an end left and no one took yet goes with the hash, so the
# script hands it back to be applied here: a delete between an end and its settle strands no count.
_CHECK_AND_DELETE = f"""
local TERMINAL = {_TERMINAL}
local m = redis.call('HMGET', KEYS[1], 'status', 'idempotency_key', 'settle', 'tenant_unfinished')
if not m[1] then return {{'missing'}} end
if not TERMINAL[m[1]] then return {{'running', m[1]}} end
redis.call('DEL', unpack(KEYS))
"""
_DELETE_BATCH = _CHECK_AND_DELETE + "return {'deleted', m[2] or '', m[3] or '', m[4] or ''}\n"

# The same on one node, where the untaken `settle` (an end by a process that settles in steps) is applied in the
# script itself. ARGV: 1 the service's unfinished count, 2 the done channel, 3 the batch id (not KEYS: every key
# given is deleted).
_DELETE_BATCH_HERE = (
    _CHECK_AND_DELETE
    + """
local left = tonumber(m[3] or '0')
if left > 0 then
  redis.call('DECRBY', ARGV[1], left)
  if m[4] then redis.call('DECRBY', m[4], left) end
end
if m[3] then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return {'deleted', m[2] or '', '', m[4] or ''}
"""
)

# The tenant's slot. KEYS: 1 stored bytes, 2 stored sizes, 3 stored until, 4 the tenant's batches, then the index of
# each metadata pair. ARGV: 1 batch id. Idempotent: the bytes are released once.
_DELETE_TENANT = """
local id = ARGV[1]
local size = redis.call('HGET', KEYS[2], id)
if size then
  redis.call('DECRBY', KEYS[1], tonumber(size))
  redis.call('HDEL', KEYS[2], id)
end
for i = 3, #KEYS do redis.call('ZREM', KEYS[i], id) end
return 1
"""


class Deletion:
    """Deletes ended batches."""

    def __init__(self, redis: Redis, keys: Keys, control: Redis | None = None) -> None:
        self.redis = redis
        self.control = redis if control is None else control
        self.keys = keys
        self.one_node = redis is self.control  # every key on one node: an untaken settle is applied in the script
        self._delete_batch = redis.register_script(_DELETE_BATCH_HERE if self.one_node else _DELETE_BATCH)
        self._delete_tenant = redis.register_script(_DELETE_TENANT)

    async def delete(self, batch_id: str) -> None:
        """Remove the ended batch and everything that names it; BatchNotFound when there is none, BatchNotEnded
        (with its status) when it is still queued, running or cancelling."""
        keys = self.keys
        tenant, raw = await cast(
            Awaitable[list[bytes | None]], self.redis.hmget(keys.batch(batch_id), ["tenant", "metadata"])
        )
        if tenant is None:
            raise BatchNotFound(batch_id)
        owner = tenant.decode()
        own = [*keys.batch_keys(batch_id), keys.questions(batch_id), keys.answers(batch_id), keys.progress(batch_id)]
        args = [keys.unfinished, keys.done_channel, batch_id] if self.one_node else []
        reply = cast(list[Any], await self._delete_batch(own, args))
        outcome = reply[0].decode()
        if outcome == "missing":
            raise BatchNotFound(batch_id)
        if outcome == "running":
            raise BatchNotEnded(batch_id, reply[1].decode())
        left, tenant_unfinished = reply[2].decode(), reply[3].decode()
        if left:
            await self.settle_counts(batch_id, int(left), tenant_unfinished)
        pairs = load_metadata(None if raw is None else raw.decode())
        shared = [keys.tenant_stored_bytes(owner), keys.tenant_stored_sizes(owner), keys.tenant_stored_until(owner)]
        shared += [keys.tenant_batches(owner), *metadata_indexes(keys, owner, pairs)]
        await self._delete_tenant(shared, [batch_id])
        if reply[1]:
            await self.redis.delete(reply[1].decode())
        async with self.control.pipeline(transaction=True) as pipe:
            pipe.zrem(keys.webhooks, batch_id)
            pipe.zrem(keys.deadlines, batch_id)
            await pipe.execute()

    async def settle_counts(self, batch_id: str, left: int, tenant_unfinished: str) -> None:
        """The counts an end left to settle, taken with the deleted hash: off the service's and the tenant's
        unfinished items, and the batch's waiters woken (they find it gone). The webhook, deadline, stored bytes and
        Idempotency-Key that a settle would also touch go with the delete."""
        async with self.control.pipeline(transaction=True) as pipe:
            pipe.decrby(self.keys.unfinished, left)
            pipe.publish(self.keys.done_channel, batch_id)
            await pipe.execute()
        if tenant_unfinished and left > 0:
            await self.redis.decrby(tenant_unfinished, left)
