"""Assembling the batch document from what the store read: pure functions over typed rows and stored records.

An item's state is derived: a result record means finished; an index below the claim cursor without one means
running; above it pending. Once the batch halts (`halt`: stop, cancel, expire) the items never run take the
matching status, and once it has ended every item without a record has it.

An item's `seq` is its place in finish order, stored with its record. Once the batch has ended, the items that never
finished take theirs after every finished one: first those never claimed, in index order, then those claimed but
never finished (`BatchRow.orphaned`). So every item of an ended batch has exactly one seq, 1 to `total`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mcp_batch.models import (
    FAILED_ITEM,
    TERMINAL_BATCH,
    BatchDocument,
    Counts,
    ItemResult,
    ItemStatus,
)
from mcp_batch.records import iso
from mcp_batch.store.batch_row import LIMITS, BatchRow, Spec

# What an item that never ran becomes when its batch halts for this reason.
HALTED = {"stop": ItemStatus.skipped, "cancel": ItemStatus.cancelled, "expire": ItemStatus.expired}


def unrun_seq(row: BatchRow, index: int) -> int | None:
    """The seq of an item that has no record, once its batch has ended (None before, or if it cannot have one)."""
    if row.status not in TERMINAL_BATCH:
        return None
    if index >= row.claimed:
        return row.finished + index - row.claimed + 1
    if index in row.orphaned:
        return row.finished + row.total - row.claimed + row.orphaned.index(index) + 1
    return None


def unrun_index(row: BatchRow, seq: int) -> int:
    """The index of the item with this seq among those that never finished (seq past `row.finished`)."""
    rank = seq - row.finished - 1
    never_claimed = row.total - row.claimed
    return row.claimed + rank if rank < never_claimed else row.orphaned[rank - never_claimed]


def unrun_item(index: int, spec: Spec, row: BatchRow) -> ItemResult:
    """An item of an ended batch that never finished, as the document shows it."""
    status = HALTED.get(row.halt or "", ItemStatus.pending)
    head = {"index": index, "id": spec.id, "server": spec.server, "tool": spec.tool}
    return ItemResult.model_validate(head | {"status": status, "seq": unrun_seq(row, index)})


def render(
    batch_id: str,
    row: BatchRow,
    offset: int,
    specs: list[Spec],
    records: dict[int, bytes],
    failed: list[tuple[str, int]],
) -> BatchDocument:
    """The document of a batch from its row, one page of its specs and their records, and its failed (id, index)."""
    total, claimed, finished = row.total, row.claimed, row.finished
    ended = row.status in TERMINAL_BATCH
    rest = HALTED.get(row.halt or "")  # the status of items that will not run, once the batch halts
    n = dict(row.counts)
    results = []
    for k, spec in enumerate(specs):
        index = offset + k
        item: dict[str, Any] = {"index": index, "id": spec.id, "server": spec.server, "tool": spec.tool}
        if index in records:
            item.update(json.loads(records[index]))
        elif index < claimed and not ended:
            item["status"] = ItemStatus.running
        else:
            item["status"] = rest or ItemStatus.pending
            if ended:
                item["seq"] = unrun_seq(row, index)
        results.append(ItemResult.model_validate(item))
    unrun = total - finished if ended else total - claimed  # items that will not run (if halted) or wait
    if rest is not None:
        n[rest] += unrun
    counts = Counts(
        total=total,
        succeeded=n[ItemStatus.ok],
        failed=sum(n[s] for s in FAILED_ITEM),
        pending=0 if rest is not None else unrun,
        running=0 if ended else claimed - finished,
        skipped=n[ItemStatus.skipped],
        cancelled=n[ItemStatus.cancelled],
        expired=n[ItemStatus.expired],
    )
    end = row.finished_at
    return BatchDocument(
        id=batch_id,
        status=row.status,
        ok=ended and counts.succeeded == total,
        mode=row.mode,
        on_error=row.on_error,
        max_concurrency=row.max_concurrency,
        counts=counts,
        failed_ids=[item_id for item_id, _ in failed],
        failed_indexes=[index for _, index in failed],
        stopped_at=row.stopped_at,
        results=results,
        results_offset=offset,
        limits=LIMITS.validate_json(row.limits),
        read_only=row.read_only,
        response_max_bytes=row.response_max_bytes,
        next_offset=offset + len(results) if offset + len(results) < total else None,
        deadline_at=iso(row.deadline_at),
        retention_seconds=row.retention,
        expires_at=iso(end + row.retention) if end is not None else None,
        created_at=iso(row.created_at) or "",
        started_at=iso(row.started_at),
        finished_at=iso(end),
        elapsed_seconds=round((end if end is not None else time.time()) - row.created_at, 6),
        retry_of=row.retry_of,
        webhook=row.webhook,
    )
