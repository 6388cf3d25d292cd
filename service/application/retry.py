"""Retrying a finished batch: the request for a new batch of only the items that did not succeed.

Each retried call is its stored call whole, every field of `Call` (a cursor, a timeout): a call the original refused
before sending it is checked again as it was, and refused again while the reason holds. The batch's settings are
kept unless the retry's body sets them (contract/retry_settings.py), and the new batch says which batch each came from.

Which items did not succeed is read without loading the results (`Reads.not_ok`); call specs are read a chunk at a
time, and only those retried.

A retried call that references a call which succeeded (and so is not retried) gets the value it referenced filled
in from the original result: in the new batch that call does not exist, and the reference would be plain text.
References between retried calls stay references: ids and order are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp_batch.contract import retry_settings
from mcp_batch.contract.references import MissingPath, dependencies, may_reference, resolve, result_value
from mcp_batch.errors import BatchNotFinished, NothingToRetry, NotRetryable
from mcp_batch.models import TERMINAL_BATCH, BatchRequest, Call, ItemStatus
from mcp_batch.retry_request import TIMEOUT, RetryRequest
from mcp_batch.store import Store
from mcp_batch.store.batch_row import Spec


@dataclass(frozen=True)
class Lineage:
    """What makes a batch a retry: the batch it retries, the batch each kept setting came from, and what the retry's
    body set (JSON; part of an Idempotency-Key's fingerprint)."""

    retry_of: str
    settings_from: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> dict[str, Any]:
        """What an Idempotency-Key is bound to: the same retry of the same batch."""
        return {"retry_of": self.retry_of} | ({"overrides": self.overrides} if self.overrides else {})


@dataclass(frozen=True)
class Retry:
    """The new batch's request, and its lineage."""

    request: BatchRequest
    lineage: Lineage


async def retry_request(store: Store, batch_id: str, body: RetryRequest | None = None) -> Retry:
    """The request that reruns the finished batch's items that did not succeed, with its settings, each replaced by
    the one `body` sets.

    BatchNotFound, BatchNotFinished, NothingToRetry, or NotRetryable for a reference retrying cannot change.
    """
    row = await store.reads.row(batch_id)
    if row.status not in TERMINAL_BATCH:
        raise BatchNotFinished(batch_id, row.status.value)
    if row.counts[ItemStatus.ok] == row.total:
        raise NothingToRetry(batch_id)
    overrides = body.model_dump(mode="json", exclude_unset=True) if body is not None else {}
    settings = retry_settings.kept(row, await store.reads.webhook_url(batch_id)) | overrides
    timeout = {TIMEOUT: settings.pop(TIMEOUT)} if TIMEOUT in settings else {}
    specs = await store.reads.specs(batch_id, await store.reads.not_ok(batch_id, row))
    arguments = await _fill_references(store, batch_id, specs)
    calls = [_call(spec, arguments[index], timeout) for index, spec in specs]
    lineage = Lineage(batch_id, retry_settings.origins(batch_id, row, overrides), overrides)
    return Retry(BatchRequest(calls=calls, **settings), lineage)


def _call(spec: Spec, arguments: dict[str, Any], replaced: dict[str, Any]) -> Call:
    """The stored call again, every field of `Call` read from it (a field the spec lacks fails here, not silently),
    with its arguments' references filled in and the fields the retry's body replaces."""
    fields = {name: getattr(spec, name) for name in Call.model_fields}
    return Call.model_validate(fields | {"arguments": arguments} | replaced)


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
