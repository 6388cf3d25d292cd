"""Storing a large batch without holding up the event loop (part of `Submits.create`).

A 100,000-call batch is 100,000 JSON encodings and a MULTI of 200,000 arguments, which redis-py would pack on the
event loop (at a microsecond or so each). A large batch's calls and ids are instead staged ahead of its MULTI: a
worker thread encodes them a step at a time, with the commands that write them already packed, and the loop sends
each step's on one connection while the thread encodes the next (Redis stores one step while the next is made), then
reads the replies. Nothing reads them until the MULTI writes the batch's meta, and they expire soon if it never
comes (admission.py, which checks the ceilings and writes the meta, removes them when it refuses the batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.models import Call
from mcp_batch.store.connection import is_cluster
from mcp_batch.store.hash_tables import TABLE_FIELD

CHUNK = 1_000  # calls per RPUSH, so one huge batch is not one huge command
STAGE_OVER = 5_000  # a batch with more calls is staged ahead of its MULTI
_STEP = 10 * CHUNK  # calls a worker thread encodes in one go while the loop sends the step before
STAGED_SECONDS = 600  # how long staged calls outlive a submit that failed before its MULTI
_OFF_LOOP_CALLS = 1_000  # a batch with more calls is encoded in a worker thread

Specs = Callable[[list[Call], int], list[bytes]]  # the stored form of calls, given the first one's index


@dataclass
class Encoded:
    """A batch's calls as its MULTI writes them: each call's spec, and the fields of the ids hash (id, index, id,
    index...)."""

    specs: list[bytes]
    ids: list[bytes]

    @property
    def stored(self) -> int:
        """The bytes of the specs (what the tenant's ceiling counts)."""
        return sum(map(len, self.specs))

    def chunk(self, start: int) -> tuple[list[bytes], list[bytes]]:
        """The specs of calls `start` to `start + CHUNK`, and their ids' fields."""
        return self.specs[start : start + CHUNK], self.ids[2 * start : 2 * (start + CHUNK)]


def _encoded(calls: list[Call], specs_of: Specs, start: int = 0) -> Encoded:
    """Calls `start`, `start + 1`... as stored."""
    specs = specs_of(calls, start)
    indexes = [b"%d" % i for i in range(start, start + len(calls))]
    ids = [index if c.id is None else c.id.encode() for index, c in zip(indexes, calls, strict=True)]
    fields: list[bytes] = [b""] * (2 * len(calls))
    fields[0::2], fields[1::2] = ids, indexes
    return Encoded(specs, fields)


async def encode(calls: list[Call], specs: Specs) -> Encoded:
    """The stored form of a batch written in its MULTI; in a worker thread for a large one."""
    return await asyncio.to_thread(_encoded, calls, specs) if len(calls) > _OFF_LOOP_CALLS else _encoded(calls, specs)


async def stage(redis: Redis, keys: Keys, batch_id: str, calls: list[Call], specs: Specs) -> int:
    """Write a large batch's calls and ids ahead of its MULTI, briefly kept (the MULTI gives them the batch's life);
    their stored bytes. A failure removes what was written."""
    calls_key, ids_key = keys.calls(batch_id).encode(), keys.ids(batch_id).encode()
    ttl = b"%d" % STAGED_SECONDS

    def step(start: int) -> tuple[list[bytes], int]:
        """The packed commands of calls `start` to `start + _STEP`, and the bytes of their specs."""
        encoded = _encoded(calls[start : start + _STEP], specs, start)
        packed = [
            _packed(b"RPUSH", calls_key, *chunk_specs) + _packed(b"HSET", ids_key, *chunk_ids)
            for chunk_specs, chunk_ids in map(encoded.chunk, range(0, len(encoded.specs), CHUNK))
        ]
        if start == 0:  # the keys exist now: they expire unless the MULTI comes; the ids hash is a table first
            table = TABLE_FIELD.encode()
            packed[0] = _packed(b"HSET", ids_key, table, b"") + packed[0] + _packed(b"HDEL", ids_key, table)
            packed[0] += _packed(b"EXPIRE", calls_key, ttl) + _packed(b"EXPIRE", ids_key, ttl)
        return packed, encoded.stored

    if is_cluster(redis):
        return await _stage_on_cluster(redis, keys.calls(batch_id), keys.ids(batch_id), calls, specs)
    pool = redis.connection_pool
    stored = 0
    try:
        connection = await pool.get_connection()
        try:
            replies = 4  # the first step's HSET and HDEL of the table's field, and its two EXPIREs
            for start in range(0, len(calls), _STEP):
                packed, size = await asyncio.to_thread(step, start)
                stored += size
                for commands in packed:
                    await connection.send_packed_command(commands, check_health=False)
                replies += 2 * len(packed)
            for _ in range(replies):
                await connection.read_response()  # an error reply is raised
        except BaseException:
            await connection.disconnect()  # replies may be left unread: the connection is not reused
            raise
        finally:
            await pool.release(connection)
    except BaseException:
        await redis.delete(calls_key, ids_key)
        raise
    return stored


async def _stage_on_cluster(redis: Redis, calls_key: str, ids_key: str, calls: list[Call], specs: Specs) -> int:
    """A cluster client has no one connection to pack onto: each step is a pipeline to the batch's node."""
    stored = 0
    try:
        for start in range(0, len(calls), _STEP):
            encoded = await asyncio.to_thread(_encoded, calls[start : start + _STEP], specs, start)
            stored += encoded.stored
            async with redis.pipeline(transaction=False) as pipe:
                if start == 0:
                    pipe.hset(ids_key, TABLE_FIELD, "")
                for chunk_start in range(0, len(encoded.specs), CHUNK):
                    chunk_specs, chunk_ids = encoded.chunk(chunk_start)
                    pipe.rpush(calls_key, *chunk_specs)
                    pipe.hset(ids_key, items=chunk_ids)
                if start == 0:
                    pipe.hdel(ids_key, TABLE_FIELD)
                    pipe.expire(calls_key, STAGED_SECONDS)
                    pipe.expire(ids_key, STAGED_SECONDS)
                await pipe.execute()
    except BaseException:
        await redis.delete(calls_key, ids_key)
        raise
    return stored


_LENGTHS = [b"$%d" % n for n in range(4096)]  # the header of a bulk string this long


def _packed(*args: bytes) -> bytes:
    """One command in the Redis protocol (RESP), as redis-py would send it: `*count`, then `$length` and each
    argument, every part ended by CRLF."""
    parts = [b""] * (2 * len(args) + 1)
    parts[0] = b"*%d" % len(args)
    parts[1::2] = [_LENGTHS[len(arg)] if len(arg) < 4096 else b"$%d" % len(arg) for arg in args]
    parts[2::2] = args
    return b"\r\n".join(parts) + b"\r\n"
