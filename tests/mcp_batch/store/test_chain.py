"""Scripts chained into one against the real Redis: each part reads its own keys and arguments, in turn, and a
refusal ends the run there."""

from __future__ import annotations

import redis.asyncio as aioredis

from mcp_batch.store.chain import chain_call, chained

# Appends its arguments to its one key's list and answers their count, or refuses when the first is 'no'.
_PART = """
if ARGV[1] == 'no' then return {1, #ARGV} end
redis.call('RPUSH', KEYS[1], unpack(ARGV))
return {0, #ARGV}
"""

# Answers a number, not a table: the run goes on past it.
_COUNT = "return #KEYS + #ARGV"


async def test_each_part_reads_its_own_keys_and_arguments_in_turn(redis: aioredis.Redis) -> None:
    script = redis.register_script(chained(_PART, _COUNT, _PART))
    keys, args = chain_call([(["a"], ["1", "2"]), (["x", "y"], ["z"]), (["b"], ["3"])])
    assert await script(keys, args) == [[0, 2], 3, [0, 1]]
    assert await redis.lrange("a", 0, -1) == [b"1", b"2"] and await redis.lrange("b", 0, -1) == [b"3"]


async def test_a_refusal_ends_the_run_there(redis: aioredis.Redis) -> None:
    script = redis.register_script(chained(_PART, _PART, _PART))
    keys, args = chain_call([(["a"], ["1"]), (["b"], ["no", "2"]), (["c"], ["3"])])
    assert await script(keys, args) == [[0, 1], [1, 2]]
    assert await redis.exists("b", "c") == 0


async def test_a_part_takes_more_arguments_than_lua_can_unpack_at_once(redis: aioredis.Redis) -> None:
    script = redis.register_script(chained(_COUNT, _COUNT))
    many = [str(i) for i in range(20_000)]
    assert await script(*chain_call([(["a"], many), ([], ["1"])])) == [20_001, 1]
