"""Retrying a finished batch: the request for a new batch of only the items that did not succeed.

Which items did not succeed is read without loading the results: the `failed` zset holds every failed index, the
`finished` list says which items have a record at all (an item without one never finished: skipped because the
batch stopped, or never claimed), and the meta counters say how many finished items are neither `ok` nor failed
(e.g. `skipped` with dependency_failed); only when there are such items are records read, a chunk at a time, until
all of them are found. Call specs are read a chunk at a time too, and only those retried.

A retried call that references a call which succeeded (and so is not retried) gets the value it referenced filled
in from the original result: in the new batch that call does not exist, and the reference would be plain text.
References between retried calls stay references: ids and order are kept.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Iterator
from typing import Any, cast

from mcp_batch.contract.references import MissingPath, dependencies, may_reference, resolve, result_value
from mcp_batch.errors import BatchNotFinished, BatchNotFound, NothingToRetry, NotRetryable
from mcp_batch.models import TERMINAL_BATCH, BatchRequest, BatchStatus, Call, ItemStatus, Mode, OnError
from mcp_batch.store.batches import Store

_CHUNK = 1_000  # indexes, ids or call specs per Redis command
_RECORD_CHUNK = 100  # result records per read: a record may be large


def _chunks(values: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


async def retry_request(store: Store, batch_id: str) -> BatchRequest:
    """The request that reruns the finished batch's items that did not succeed, with its settings.

    BatchNotFound, BatchNotFinished, NothingToRetry, or NotRetryable for a reference retrying cannot change.
    """
    raw = await cast(Awaitable[dict[bytes, bytes]], store.redis.hgetall(store.keys.batch(batch_id)))
    if not raw:
        raise BatchNotFound(batch_id)
    meta = {k.decode(): v.decode() for k, v in raw.items()}
    status = BatchStatus(meta["status"])
    if status not in TERMINAL_BATCH:
        raise BatchNotFinished(batch_id, status.value)
    if int(meta.get(f"n:{ItemStatus.ok.value}", 0)) == int(meta["total"]):
        raise NothingToRetry(batch_id)
    indexes = await _not_ok(store, batch_id, meta)
    specs = await _specs(store, batch_id, indexes)
    await _fill_references(store, batch_id, specs)
    return BatchRequest(
        calls=[Call(id=s["id"], server=s["server"], tool=s["tool"], arguments=s["arguments"]) for _, s in specs],
        mode=Mode(meta["mode"]),
        on_error=OnError(meta["on_error"]),
        max_concurrency=int(meta["max_concurrency"]),
        read_only=meta.get("read_only", "1") == "1",
        response_max_bytes=int(meta["response_max_bytes"]),
    )


async def _not_ok(store: Store, batch_id: str, meta: dict[str, str]) -> list[int]:
    """Indexes of the items whose status is not `ok`, in order."""
    redis, keys = store.redis, store.keys
    total, finished, ok = int(meta["total"]), int(meta["finished"]), int(meta.get(f"n:{ItemStatus.ok.value}", 0))
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
            raw = await cast(Awaitable[list[bytes]], redis.lrange(keys.finished(batch_id), start, start + _CHUNK - 1))
            done.update(int(i) for i in raw)
    others = finished - ok - len(not_ok)  # finished, neither ok nor failed (e.g. skipped): only records tell which
    unsure = [i for i in range(total) if i in done and i not in not_ok] if others > 0 else []
    for chunk in _chunks(unsure, _RECORD_CHUNK):
        records = await cast(Awaitable[list[bytes | None]], redis.hmget(keys.results(batch_id), chunk))
        found = {i for i, r in zip(chunk, records, strict=True) if r and json.loads(r)["status"] != ItemStatus.ok.value}
        not_ok |= found
        others -= len(found)
        if others <= 0:
            break
    return [i for i in range(total) if i in not_ok or i not in done]


async def _specs(store: Store, batch_id: str, indexes: list[int]) -> list[tuple[int, dict[str, Any]]]:
    """(index, call spec) of these items."""
    specs: list[tuple[int, dict[str, Any]]] = []
    for chunk in _chunks(indexes, _CHUNK):
        async with store.redis.pipeline(transaction=False) as pipe:
            for index in chunk:
                pipe.lindex(store.keys.calls(batch_id), index)
            raw = await pipe.execute()
        if any(spec is None for spec in raw):
            raise BatchNotFound(batch_id)  # expired while being read
        specs.extend((index, json.loads(spec)) for index, spec in zip(chunk, raw, strict=True))
    return specs


async def _fill_references(store: Store, batch_id: str, specs: list[tuple[int, dict[str, Any]]]) -> None:
    """Replace, in place, each reference to a call that is not retried by the value it referenced."""
    linked = [(index, spec) for index, spec in specs if may_reference(spec["arguments"])]
    if not linked:
        return
    ids = await store.id_index(batch_id)
    retried = {index for index, _ in specs}
    needs = {index: dependencies(spec["arguments"], ids, index) - retried for index, spec in linked}
    kept = set().union(*needs.values())
    if not kept:
        return
    records = await store.records(batch_id, sorted(kept))
    values = {index: result_value(record) for index, record in records.items()}
    kept_ids = {name: index for name, index in ids.items() if index in kept}  # references to retried calls stay
    for index, spec in linked:
        try:
            spec["arguments"] = resolve(spec["arguments"], kept_ids, index, values)
        except MissingPath as exc:
            raise NotRetryable(
                f"call {spec['id']!r} references {exc.path!r}, which the result of a call that succeeded does not"
                " have: a retry cannot change that"
            ) from exc
