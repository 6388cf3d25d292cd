"""Reading batches, as plain data: a page of a batch (its row, the page's calls and records, every failed item), one
item, items in finish order, what a retry needs, and waiting for a batch to end. contract/document.py renders them.

A row is read as of now (`BatchRow.as_of`): a batch past its deadline reads as the workers' sweep will make it,
without a read writing anything.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from redis.asyncio import Redis

from mcp_batch.errors import BatchNotFound, ItemNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH, BatchStatus, ItemStatus
from mcp_batch.store.batch_row import (
    BatchRow,
    Spec,
    load_head,
    load_spec,
    parse_row,
)
from mcp_batch.store.channels import Listener
from mcp_batch.store.connection import atomic
from mcp_batch.tenants import DEFAULT_TENANT

_CHUNK = 1_000  # indexes, ids or call specs per Redis command
_RECORD_CHUNK = 100  # result records per read: a record may be large
_GAP = 32  # call specs read past that no item of the chunk needs, at most, between two it does (see `spans`)


@dataclass(frozen=True)
class PageRead:
    """A page of a batch as stored: the row, the calls of the page (each its head: index, id, server, tool), the
    records of those that finished, and every failed item's (id, index)."""

    row: BatchRow
    offset: int
    heads: list[dict[str, Any]]
    records: Mapping[int, bytes]
    failed: list[tuple[str, int]]


@dataclass(frozen=True)
class ItemRead:
    """One item as stored: its batch's row, its call (head and spec), and its record if it finished."""

    row: BatchRow
    head: dict[str, Any]
    spec: Spec
    record: bytes | None


class Ended(NamedTuple):
    """An item in finish order: its seq, its call's head, and its record (None: it never ran, its batch has ended)."""

    seq: int
    head: dict[str, Any]
    record: bytes | None


def _row(raw: Mapping[bytes, bytes]) -> BatchRow | None:
    row = parse_row(raw)
    return None if row is None else row.as_of(time.time())


def spans(indexes: list[int], gap: int = _GAP) -> list[tuple[int, int]]:
    """The runs (first, last) that cover these indexes, sorted, with at most `gap` unneeded indexes inside each: so
    the calls of items that finished near each other come in one LRANGE, and no run reads many it does not need."""
    runs: list[tuple[int, int]] = []
    ordered = sorted(set(indexes))
    first = last = ordered[0]
    for index in ordered[1:]:
        if index - last > gap + 1:
            runs.append((first, last))
            first = index
        last = index
    runs.append((first, last))
    return runs


def _failed(raw: list[tuple[bytes, float]]) -> list[tuple[str, int]]:
    return [(member.decode(), int(score)) for member, score in raw]


class Reads:
    """Everything the doors read about a batch."""

    def __init__(self, redis: Redis, keys: Keys, done: Listener | None) -> None:
        self.redis = redis
        self.keys = keys
        self._done = done  # the API's listener on the done channel; workers do not wait

    async def status(self, batch_id: str) -> BatchStatus:
        raw = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.batch(batch_id), "status"))
        if raw is None:
            raise BatchNotFound(batch_id)
        return BatchStatus(raw.decode())

    async def row(self, batch_id: str) -> BatchRow:
        """The batch's row, as of now."""
        row = _row(await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(self.keys.batch(batch_id))))
        if row is None:
            raise BatchNotFound(batch_id)
        return row

    async def webhook_url(self, batch_id: str) -> str | None:
        """The batch's webhook URL (a secret: read for a retry to keep it, never shown), or None."""
        raw = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.batch(batch_id), "webhook_url"))
        return None if raw is None else raw.decode()

    async def page_facts(self, batch_id: str) -> tuple[int, str]:
        """What reading a page needs first: the batch's response_max_bytes and its tenant."""
        fields = ["response_max_bytes", "tenant"]
        raw = await cast(Awaitable[list[bytes | None]], self.redis.hmget(self.keys.batch(batch_id), fields))
        if raw[0] is None:
            raise BatchNotFound(batch_id)
        return int(raw[0]), (raw[1] or DEFAULT_TENANT.encode()).decode()

    async def page(self, batch_id: str, offset: int = 0, limit: int | None = None) -> PageRead:
        """The batch and the page of its items asked for (all of them without a limit), read at one instant."""
        meta_k, calls_k, results_k, failed_k = self.keys.batch_keys(batch_id)[:4]
        end = -1 if limit is None else offset + limit - 1
        async with self.redis.pipeline(transaction=atomic(self.redis)) as pipe:
            pipe.hgetall(meta_k)
            if end < offset and limit is not None:  # limit=0: no page (LRANGE with end -1 would read them all)
                pipe.lrange(calls_k, 1, 0)
            else:
                pipe.lrange(calls_k, offset, end)
            if limit is None:
                pipe.hgetall(results_k)
            else:
                pipe.hmget(results_k, list(range(offset, offset + limit)) or [0])
            pipe.zrange(failed_k, 0, -1, withscores=True)
            raw_meta, raw_calls, raw_results, raw_failed = await pipe.execute()
        row = _row(raw_meta)
        if row is None:
            raise BatchNotFound(batch_id)
        if limit is None:
            records = {int(k): v for k, v in raw_results.items()}
        else:
            records = {offset + i: v for i, v in enumerate(raw_results) if v is not None}
        heads = [load_head(offset + k, raw) for k, raw in enumerate(raw_calls)]
        return PageRead(row, offset, heads, records, _failed(raw_failed))

    async def located(self, batch_id: str, item_id: str) -> ItemRead:
        """One item by its id."""
        raw_index = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.ids(batch_id), item_id))
        if raw_index is None:
            await self.status(batch_id)  # BatchNotFound when the batch itself is gone
            raise ItemNotFound(batch_id, item_id)
        found = await self.at(batch_id, int(raw_index))
        if found is None:
            raise BatchNotFound(batch_id)
        return found

    async def at(self, batch_id: str, index: int) -> ItemRead | None:
        """One item by its index; None when there is no such item."""
        async with self.redis.pipeline(transaction=atomic(self.redis)) as pipe:  # not page(): it reads every failed id
            pipe.hgetall(self.keys.batch(batch_id))
            pipe.lindex(self.keys.calls(batch_id), index)
            pipe.hget(self.keys.results(batch_id), str(index))
            raw_meta, raw_spec, record = await pipe.execute()
        row = _row(raw_meta)
        if row is None or raw_spec is None:
            return None
        return ItemRead(row, load_head(index, raw_spec), load_spec(raw_spec), record)

    async def finished_since(
        self, batch_id: str, after: int, row: BatchRow, chunk: int = 500
    ) -> AsyncIterator[list[Ended]]:
        """Items in finish order after the `after`-th, as of `row` (a snapshot), in chunks: the finished ones, then,
        once the batch has ended, those that never finished (see `BatchRow.unrun_seq`). A chunk's records come in one
        HMGET, its calls in an LRANGE per run of near indexes."""
        keys = self.keys
        finished_k, results_k, calls_k = keys.finished(batch_id), keys.results(batch_id), keys.calls(batch_id)
        position, end = after, row.ended_items
        while position < end:
            stop = min(end, position + chunk)
            if position < row.finished:
                stop = min(stop, row.finished)
                raw = await cast(Awaitable[list[bytes]], self.redis.lrange(finished_k, position, stop - 1))
                indexes = [int(i) for i in raw]
            else:
                indexes = [row.unrun_index(seq) for seq in range(position + 1, stop + 1)]
            if not indexes:
                raise BatchNotFound(batch_id)  # expired while being read
            runs = spans(indexes)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hmget(results_k, indexes)
                for first, last in runs:
                    pipe.lrange(calls_k, first, last)
                records, *calls = await pipe.execute()
            specs: dict[int, bytes] = {}
            for (first, last), found in zip(runs, calls, strict=True):
                if len(found) != last - first + 1:
                    raise BatchNotFound(batch_id)  # expired while being read
                specs.update(zip(range(first, last + 1), found, strict=True))
            seqs = range(position + 1, stop + 1)
            yield [
                Ended(seq, load_head(index, specs[index]), record)
                for seq, index, record in zip(seqs, indexes, records, strict=False)
            ]
            position += len(indexes)

    async def id_index(self, batch_id: str) -> dict[str, int]:
        """Casefolded item id -> index, for resolving references."""
        raw = await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(self.keys.ids(batch_id)))
        return {k.decode().casefold(): int(v) for k, v in raw.items()}

    async def records(self, batch_id: str, indexes: list[int]) -> dict[int, dict[str, Any]]:
        """The stored result records of these items (finished ones only)."""
        raw = await cast(Awaitable[list[bytes | None]], self.redis.hmget(self.keys.results(batch_id), indexes))
        return {i: json.loads(r) for i, r in zip(indexes, raw, strict=True) if r is not None}

    async def not_ok(self, batch_id: str, row: BatchRow) -> list[int]:
        """Indexes of the items whose status is not `ok`, in order, read without loading every record.

        The `failed` zset holds every failed index, the `finished` list says which items have a record at all (an
        item without one never finished), and the row's counters say how many finished items are neither `ok` nor
        failed (e.g. skipped); only then are records read, a chunk at a time, until all of them are found."""
        redis, keys, total, finished = self.redis, self.keys, row.total, row.finished
        ok = row.counts[ItemStatus.ok]
        not_ok: set[int] = set()
        for start in range(0, total, _CHUNK):
            scored = await redis.zrange(keys.failed(batch_id), start, start + _CHUNK - 1, withscores=True)
            not_ok.update(int(score) for _, score in scored)
            if len(scored) < _CHUNK:
                break
        done: set[int] | range = range(total)
        if finished < total:
            done = set()
            for start in range(0, finished, _CHUNK):
                raw = await cast(
                    Awaitable[list[bytes]], redis.lrange(keys.finished(batch_id), start, start + _CHUNK - 1)
                )
                done.update(int(i) for i in raw)
        others = finished - ok - len(not_ok)  # finished, neither ok nor failed (e.g. skipped): only records tell
        unsure = [i for i in range(total) if i in done and i not in not_ok] if others > 0 else []
        for start in range(0, len(unsure), _RECORD_CHUNK):
            chunk = unsure[start : start + _RECORD_CHUNK]
            records = await cast(Awaitable[list[bytes | None]], redis.hmget(keys.results(batch_id), chunk))
            found = {i for i, r in zip(chunk, records, strict=True) if r and json.loads(r)["status"] != ItemStatus.ok}
            not_ok |= found
            others -= len(found)
            if others <= 0:
                break
        return [i for i in range(total) if i in not_ok or i not in done]

    async def specs(self, batch_id: str, indexes: list[int]) -> list[tuple[int, Spec]]:
        """(index, call spec) of these items."""
        specs: list[tuple[int, Spec]] = []
        for start in range(0, len(indexes), _CHUNK):
            chunk = indexes[start : start + _CHUNK]
            async with self.redis.pipeline(transaction=False) as pipe:
                for index in chunk:
                    pipe.lindex(self.keys.calls(batch_id), index)
                raw = await pipe.execute()
            if any(spec is None for spec in raw):
                raise BatchNotFound(batch_id)  # expired while being read
            specs.extend((index, load_spec(spec)) for index, spec in zip(chunk, raw, strict=True))
        return specs

    async def wait(self, batch_id: str, timeout: float) -> BatchRow:
        """Return when the batch has ended (as a reader sees it: `BatchRow.as_of`) or `timeout` passes; woken by the
        done channel, not by polling, and at the batch's deadline, which may end it for a reader. Returns the row
        it read last: what never changes in it (`page_facts`) need not be read again."""
        if self._done is None:
            raise RuntimeError("this store has no done-channel listener")
        loop = asyncio.get_running_loop()
        give_up = loop.time() + timeout
        with self._done.watch(batch_id) as event:
            while True:
                row = await self.row(batch_id)
                left = give_up - loop.time()
                if row.status in TERMINAL_BATCH or left <= 0:
                    return row
                if row.deadline_at is not None and row.halt is None:  # woken at the deadline to read it again
                    left = min(left, max(0.0, row.deadline_at - time.time()) + 0.001)
                try:
                    async with asyncio.timeout(left):
                        await event.wait()
                    return row
                except TimeoutError:
                    continue
