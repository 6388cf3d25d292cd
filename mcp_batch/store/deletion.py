"""Deleting an ended batch whole, in one script (`Store.deletion`): every key of the batch, its place in its tenant's
list and in the index of each of its metadata pairs, its Idempotency-Key's record, its stored bytes (released now,
not when its keys would have expired) and a completion webhook not yet delivered. Atomic: a batch is there whole or
not at all, and one that has not ended is refused without a change.

The keys the script touches are named from the batch's hash (its tenant and metadata, which never change once
written), read first; the script reads the hash again, so a batch deleted or ended in between is seen as it is.
A webhook attempt a worker has already claimed may still be sent; the next one finds the batch gone.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch.errors import BatchNotEnded, BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH
from mcp_batch.store.batch_row import load_metadata

_TERMINAL = "{" + ", ".join(f"{status.value} = true" for status in sorted(TERMINAL_BATCH)) + "}"

# KEYS: 1-8 the batch's keys (Keys.batch_keys; any more it lists follow, `ARGV[2]` of them), then webhooks,
#       deadlines, tenant batches, tenant stored bytes, tenant stored sizes, tenant stored until, then the index of
#       each metadata pair. ARGV: 1 batch id, 2 how many batch keys.
# Returns {'deleted'}, {'missing'} or {'running', status}.
_DELETE = f"""
local TERMINAL = {_TERMINAL}
local id, n = ARGV[1], tonumber(ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'status', 'idempotency_key')
if not m[1] then return {{'missing'}} end
if not TERMINAL[m[1]] then return {{'running', m[1]}} end
local webhooks, deadlines, list, bytes, sizes, untils = n + 1, n + 2, n + 3, n + 4, n + 5, n + 6
local size = redis.call('HGET', KEYS[sizes], id)
if size then
  redis.call('DECRBY', KEYS[bytes], tonumber(size))
  redis.call('HDEL', KEYS[sizes], id)
end
redis.call('ZREM', KEYS[untils], id)
redis.call('ZREM', KEYS[list], id)
for i = n + 7, #KEYS do redis.call('ZREM', KEYS[i], id) end
redis.call('ZREM', KEYS[webhooks], id)
redis.call('ZREM', KEYS[deadlines], id)
if m[2] then redis.call('DEL', m[2]) end
for i = 1, n do redis.call('DEL', KEYS[i]) end
return {{'deleted'}}
"""


class Deletion:
    """Deletes ended batches."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._delete = redis.register_script(_DELETE)

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
        own = keys.batch_keys(batch_id)
        shared = [keys.webhooks, keys.deadlines, keys.tenant_batches(owner), keys.tenant_stored_bytes(owner)]
        shared += [keys.tenant_stored_sizes(owner), keys.tenant_stored_until(owner)]
        pairs = load_metadata(None if raw is None else raw.decode())
        indexes = [keys.tenant_metadata(owner, key, value) for key, value in pairs.items()]
        reply = cast(list[Any], await self._delete([*own, *shared, *indexes], [batch_id, len(own)]))
        outcome = reply[0].decode()
        if outcome == "missing":
            raise BatchNotFound(batch_id)
        if outcome == "running":
            raise BatchNotEnded(batch_id, reply[1].decode())
