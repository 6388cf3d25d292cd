"""Rendering what the store read: the batch document and its items, pure functions over typed rows and stored
records (store/reads.py hands them over as plain data).

An item's state is derived: a result record means finished; an index below the claim cursor without one means
running, unless its worker holds it unsent (read ahead: pending); above it pending. The counts' `running` is what
the workers last reported running (`BatchRow.running`); the other claimed items without a record count as pending.
Once the batch halts (`halt`: stop, cancel, expire) the items never run take the matching status, and once it has
ended every item without a record has it.

An item's `seq` is its place in finish order, stored with its record. Once the batch has ended, the items that never
finished take theirs after every finished one (`BatchRow.unrun_seq`), so every item of an ended batch has exactly
one seq, 1 to `total`. Of those claimed but never finished, one a stopped worker had in flight (`BatchRow.lost`)
carries an `interrupted` error: it may have run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from mcp_batch.contract import plain_items, retry_settings
from mcp_batch.contract.plain_items import PlainItem
from mcp_batch.models import (
    FAILED_ITEM,
    HALTED,
    TERMINAL_BATCH,
    BatchDocument,
    Counts,
    ItemStatus,
)
from mcp_batch.records import error_info, iso
from mcp_batch.store.batch_row import LIMITS, BatchRow
from mcp_batch.store.reads import Ended, ItemRead, PageRead

# What an item that never ran becomes when its batch halts for this reason.


def page(batch_id: str, read: PageRead) -> tuple[BatchDocument, list[PlainItem]]:
    """A page of the document: the document (its `results` left for the caller to fill) and the page's items."""
    items = page_items(read.row, read.heads, read.records)
    return summary(batch_id, read.row, read.offset, len(items), read.failed), items


def item(read: ItemRead) -> PlainItem:
    """One item, whole."""
    (found,) = page_items(read.row, [read.head], {} if read.record is None else {read.head["index"]: read.record})
    return found


def in_finish_order(row: BatchRow, ended: list[Ended]) -> list[PlainItem]:
    """Items read in finish order, each with its seq: finished ones from their records, the others as the ended
    batch leaves them."""
    return [
        unrun_item(found.head, row) if found.record is None else plain_items.stored(found.head, found.record, found.seq)
        for found in ended
    ]


# Why a call a stopped worker had in flight never finished, by the batch's halt.
_HALTED_WHY = {
    "cancel": "the batch was cancelled",
    "expire": "the batch's deadline passed",
    "stop": "the batch stopped (on_error: stop)",
}


def _unrun(head: Mapping[str, Any], row: BatchRow, status: str, seq: int | None) -> PlainItem:
    """An item without a record, with `status`; one a stopped worker had in flight says it may have run, and whose
    it was."""
    fields: dict[str, Any] = {**head, "status": status, "seq": seq}
    worker = row.lost.get(head["index"])
    if worker is not None:
        why = _HALTED_WHY.get(row.halt or "", "the batch ended")
        message = (
            f"the worker running this call stopped while it was in flight, and {why} before another worker took "
            "it over: the call may or may not have run"
        )
        fields["error"] = error_info("interrupted", message, "batch", may_have_run=True)
        if worker:
            fields["worker"] = worker
    return plain_items.item(fields)


def unrun_item(head: Mapping[str, Any], row: BatchRow) -> PlainItem:
    """An item of an ended batch that never finished (`head`: its call's index, id, server, tool), as the document
    shows it."""
    status = HALTED.get(row.halt or "", ItemStatus.pending)
    return _unrun(head, row, status.value, row.unrun_seq(head["index"]))


def page_items(row: BatchRow, heads: list[dict[str, Any]], records: Mapping[int, bytes]) -> list[PlainItem]:
    """The items of these calls (each head: its index, id, server, tool) as plain data: from its record when it has
    one, else the state derived for it."""
    claimed, ended = row.claimed, row.status in TERMINAL_BATCH
    rest = HALTED.get(row.halt or "", ItemStatus.pending).value  # the status of items that never ran, once halted
    items = []
    for head in heads:
        index = head["index"]
        record = records.get(index)
        if record is not None:
            items.append(plain_items.stored(head, record))
        elif index < claimed and not ended:
            status = ItemStatus.pending if index in row.held else ItemStatus.running
            items.append(plain_items.item({**head, "status": status.value}))
        elif ended:
            items.append(_unrun(head, row, rest, row.unrun_seq(index)))
        else:
            items.append(plain_items.item({**head, "status": rest}))
    return items


def summary(batch_id: str, row: BatchRow, offset: int, shown: int, failed: list[tuple[str, int]]) -> BatchDocument:
    """The document of a batch from its row and its failed (id, index), its `results` left empty: the page of
    `shown` items from `offset` is the caller's to fill in (`next_offset` follows it)."""
    total, claimed, finished = row.total, row.claimed, row.finished
    ended = row.status in TERMINAL_BATCH
    rest = HALTED.get(row.halt or "")  # the status of items that will not run, once the batch halts
    n = dict(row.counts)
    unrun = total - finished if ended else total - claimed  # items that will not run (if halted) or wait
    if rest is not None:
        n[rest] += unrun
    running = 0 if ended else row.running
    waiting = 0 if ended else claimed - finished - running  # claimed, not running: held unsent, or just ended
    counts = Counts(
        total=total,
        succeeded=n[ItemStatus.ok],
        failed=sum(n[s] for s in FAILED_ITEM),
        pending=waiting + (0 if rest is not None else unrun),
        running=running,
        skipped=n[ItemStatus.skipped],
        cancelled=n[ItemStatus.cancelled],
        expired=n[ItemStatus.expired],
        unauthenticated=n[ItemStatus.unauthenticated],
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
        results=[],
        results_offset=offset,
        limits=LIMITS.validate_json(row.limits),
        read_only=row.read_only,
        priority=row.priority,
        response_max_bytes=row.response_max_bytes,
        next_offset=offset + shown if offset + shown < total else None,
        deadline_at=iso(row.deadline_at),
        retention_seconds=row.retention,
        expires_at=iso(end + row.retention) if end is not None else None,
        created_at=iso(row.created_at) or "",
        started_at=iso(row.started_at),
        finished_at=iso(end),
        elapsed_seconds=round((end if end is not None else time.time()) - row.created_at, 6),
        retry_of=row.retry_of,
        settings_from=retry_settings.settings_from(batch_id, row),
        webhook=row.webhook,
        metadata=row.metadata,
    )
