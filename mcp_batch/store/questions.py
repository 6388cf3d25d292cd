"""The questions backends are waiting on and the callers' answers (`Store.questions`): one hash of each per batch.

A worker stores a question when its backend asks (`ask`), then takes the answer when one comes (`take`), or, when
the wait runs out, withdraws the question and takes any answer that came in the meantime. `answer` stores an answer
only for the question still waiting, by its id: a late answer, or one to a question already answered, changes
nothing. Both hashes expire a while after the longest wait they serve, so a worker that died while waiting leaves
nothing behind for long (and a reader ignores a question once the item has a result or the batch has ended).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys

_MARGIN_MS = 60_000  # the keys outlive the wait they serve by this much

# KEYS: questions, answers. ARGV: index, question JSON, ttl ms.
_ASK = """
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
"""

# KEYS: questions, answers. ARGV: index, question id, answer JSON, ttl ms. 1: stored; 0: no such question waits.
_ANSWER = """
local q = redis.call('HGET', KEYS[1], ARGV[1])
if not q or cjson.decode(q)['id'] ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
return 1
"""

# The tenant's slot. KEYS: its stored bytes, its stored sizes. ARGV: batch id, the answer's bytes. Counted with the
# batch's own bytes (released with them), and only while the batch holds bytes at all.
_COUNT = """
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[1], ARGV[2])
redis.call('INCRBY', KEYS[1], ARGV[2])
return 1
"""

# KEYS: questions, answers. ARGV: index, question id, withdraw (1: the wait is over). The answer, if one came.
_TAKE = """
local a = redis.call('HGET', KEYS[2], ARGV[1])
if a then redis.call('HDEL', KEYS[2], ARGV[1]) end
if ARGV[3] == '1' then
  local q = redis.call('HGET', KEYS[1], ARGV[1])
  if q and cjson.decode(q)['id'] == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
end
return a
"""


class Questions:
    """Questions waiting for answers, per batch and item index."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._ask = redis.register_script(_ASK)
        self._answer = redis.register_script(_ANSWER)
        self._take = redis.register_script(_TAKE)
        self._count = redis.register_script(_COUNT)

    def _keys(self, batch_id: str) -> list[str]:
        return [self.keys.questions(batch_id), self.keys.answers(batch_id)]

    async def ask(self, batch_id: str, index: int, question: bytes, wait_seconds: float) -> None:
        """Store the item's question (replacing an answer left from an earlier one)."""
        ttl = int(wait_seconds * 1000) + _MARGIN_MS
        await self._ask(keys=self._keys(batch_id), args=[index, question, ttl])

    async def answer(
        self, batch_id: str, index: int, question_id: str, answer: bytes, wait_seconds: float, tenant: str
    ) -> bool:
        """Store the answer to the item's waiting question `question_id`, its bytes counted in the tenant's stored
        bytes with the batch's own; False when that question is not waiting."""
        ttl = int(wait_seconds * 1000) + _MARGIN_MS
        if not await self._answer(keys=self._keys(batch_id), args=[index, question_id, answer, ttl]):
            return False
        keys = [self.keys.tenant_stored_bytes(tenant), self.keys.tenant_stored_sizes(tenant)]
        await self._count(keys=keys, args=[batch_id, len(answer)])
        return True

    async def take(self, batch_id: str, index: int, question_id: str, withdraw: bool = False) -> bytes | None:
        """The answer to the item's question, taken (None: none yet); `withdraw`: the wait is over, the question
        goes too."""
        found = await self._take(keys=self._keys(batch_id), args=[index, question_id, int(withdraw)])
        return cast(bytes | None, found)

    async def waiting(self, batch_id: str) -> dict[int, bytes]:
        """Every question of the batch still waiting: item index -> the question (JSON)."""
        raw = await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(self.keys.questions(batch_id)))
        return {int(index): question for index, question in raw.items()}
