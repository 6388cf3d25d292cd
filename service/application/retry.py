"""Retrying a finished batch: the request for a new batch of only the items that did not succeed.

Which items did not succeed is read without loading the results (`Reads.not_ok`); call specs are read a chunk at a
time, and only those retried.

A retried call that references a call which succeeded (and so is not retried) gets the value it referenced filled
in from the original result: in the new batch that call does not exist, and the reference would be plain text.
References between retried calls stay references: ids and order are kept.
"""

from __future__ import annotations

from typing import Any

from mcp_batch.contract.references import MissingPath, dependencies, may_reference, resolve, result_value
from mcp_batch.errors import BatchNotFinished, NothingToRetry, NotRetryable
from mcp_batch.models import TERMINAL_BATCH, BatchRequest, Call, ItemStatus
from mcp_batch.store import Store
from mcp_batch.store.batch_row import Spec


async def retry_request(store: Store, batch_id: str) -> BatchRequest:
    """The request that reruns the finished batch's items that did not succeed, with its settings.

    BatchNotFound, BatchNotFinished, NothingToRetry, or NotRetryable for a reference retrying cannot change.
    """
    row = await store.reads.row(batch_id)
    if row.status not in TERMINAL_BATCH:
        raise BatchNotFinished(batch_id, row.status.value)
    if row.counts[ItemStatus.ok] == row.total:
        raise NothingToRetry(batch_id)
    specs = await store.reads.specs(batch_id, await store.reads.not_ok(batch_id, row))
    arguments = await _fill_references(store, batch_id, specs)
    return BatchRequest(
        calls=[Call(id=s.id, server=s.server, tool=s.tool, arguments=arguments[i]) for i, s in specs],
        mode=row.mode,
        on_error=row.on_error,
        max_concurrency=row.max_concurrency,
        read_only=row.read_only,
        response_max_bytes=row.response_max_bytes,
    )


async def _fill_references(store: Store, batch_id: str, specs: list[tuple[int, Spec]]) -> dict[int, dict[str, Any]]:
    """Each retried call's arguments, with each reference to a call that is not retried replaced by its value."""
    arguments = {index: spec.arguments for index, spec in specs}
    linked = [(index, spec) for index, spec in specs if may_reference(spec.arguments)]
    if not linked:
        return arguments
    ids = await store.reads.id_index(batch_id)
    retried = {index for index, _ in specs}
    needs = {index: dependencies(spec.arguments, ids, index) - retried for index, spec in linked}
    kept = set().union(*needs.values())
    if not kept:
        return arguments
    records = await store.reads.records(batch_id, sorted(kept))
    values = {index: result_value(record) for index, record in records.items()}
    kept_ids = {name: index for name, index in ids.items() if index in kept}  # references to retried calls stay
    for index, spec in linked:
        try:
            arguments[index] = resolve(spec.arguments, kept_ids, index, values)
        except MissingPath as exc:
            raise NotRetryable(
                f"call {spec.id!r} references {exc.path!r}, which the result of a call that succeeded does not"
                " have: a retry cannot change that"
            ) from exc
    return arguments
