"""Use cases that read a batch: the document (wait, then one page within the byte budget), one item (paged), the
finished items as JSON Lines, the caller's batches, the last items of its newest batches, and cancel. Every door
reads through these, so every door applies the budget the same way. A read writes nothing: a batch past its
deadline reads as the store presents it (`BatchRow.as_of`), and the workers record its end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, Field

from mcp_batch.contract import budget, plain_items, running
from mcp_batch.contract import document as documents
from mcp_batch.contract.item_cursors import Position, cursor_length, locate
from mcp_batch.errors import BatchNotFound, InvalidCursor
from mcp_batch.item_progress import ItemProgress
from mcp_batch.models import BatchDocument, BatchList, BatchStatus, ItemPage, ItemResult, ItemStatus
from mcp_batch.store.batch_row import BatchRow
from mcp_batch.store.reads import PageRead
from mcp_batch.store.tenant_index import Filters
from mcp_batch.tenants import Caller, Right, require
from service.application.questions import item_with_question, with_questions
from service.application.services import Services


async def document(
    services: Services, batch_id: str, offset: int = 0, limit: int | None = None, known: BatchRow | None = None
) -> BatchDocument:
    """A page of the document that fits the batch's byte budget: no more items than the budget holds, each item
    over its share filled up to it, with a `next_cursor` to the rest. `known`: a row of the batch read earlier,
    for what never changes (its budget and tenant)."""
    store = services.store
    if known is None:
        max_bytes, tenant = await store.reads.page_facts(batch_id)
    else:
        max_bytes, tenant = known.response_max_bytes, known.tenant
    page = budget.most_items(max_bytes) if limit is None else min(limit, budget.most_items(max_bytes))
    found, plain = documents.page(batch_id, await store.reads.page(batch_id, offset, page))
    if indexes := running.running(plain):  # a page without running items reads no progress
        running.attach(plain, await store.progress.of(batch_id, indexes))
    items, removed, resumes = budget.fit(cast(list[dict[str, Any]], plain), max_bytes, cursor_length(batch_id))
    for k, (block, char) in resumes.items():
        items[k]["next_cursor"] = services.cursors.issue(tenant, Position(batch_id, items[k]["index"], block, char))
    results = [ItemResult.model_validate(item) for item in items]
    found = found.model_copy(update={"results": results, "truncated": removed > 0, "truncated_bytes": removed})
    return await with_questions(services, found)  # items waiting for an answer, as `input_required`


def submitted_document(batch_id: str, row: BatchRow) -> BatchDocument:
    """The document of a batch as its submit stored it, no page of results (what `document(limit=0)` would read
    then: nothing has run, so nothing waits for an answer)."""
    found, _ = documents.page(batch_id, PageRead(row, 0, [], {}, []))
    return found.model_copy(update={"results": [], "truncated": False, "truncated_bytes": 0})


async def progress(services: Services, batch_id: str) -> list[tuple[str, ItemProgress]]:
    """The latest progress of the batch's running items that reported any, by index: (item id, progress)."""
    reports = await services.store.progress.every(batch_id)
    return [(reports[index]["id"], running.shown(reports[index])) for index in sorted(reports)]


async def wait(services: Services, batch_id: str, seconds: float) -> BatchRow | None:
    """Hold until the batch ends or `seconds` pass (at most the service's `max_wait_seconds`); the row it read last
    (None: no wait)."""
    if seconds > 0:
        return await services.store.reads.wait(batch_id, min(seconds, services.settings.max_wait_seconds))
    return None


async def read(
    services: Services, batch_id: str, wait_seconds: float = 0, offset: int = 0, limit: int | None = None
) -> BatchDocument:
    """Wait (up to `wait_seconds`) for the batch to end, then one page of its document."""
    known = await wait(services, batch_id, wait_seconds)
    return await document(services, batch_id, offset, limit, known)


async def item(services: Services, batch_id: str, item_id: str, cursor: str | None = None) -> ItemPage:
    """The stored item; when it is larger than one response, as much of it as one holds and `next_cursor`, and from
    a cursor, the next page of its content. InvalidCursor when the cursor does not verify or is another item's."""
    located = await services.store.reads.located(batch_id, item_id)
    plain = [documents.item(located)]
    if indexes := running.running(plain):
        running.attach(plain, await services.store.progress.of(batch_id, indexes))
    found = ItemResult.model_validate(plain[0]).model_dump(mode="json")  # measured as it is sent
    tenant = located.row.tenant
    if cursor is None:
        small, resume = budget.shrink(found, services.settings.response_max_bytes, cursor_length(batch_id))
    else:
        at = services.cursors.open(cursor, tenant)
        if (at.batch_id, at.index) != (batch_id, found["index"]):
            raise InvalidCursor("the cursor belongs to another item")
        small, resume = budget.page(
            found, locate(found, at), services.settings.response_max_bytes, cursor_length(batch_id)
        )
    if resume is not None:
        small["next_cursor"] = services.cursors.issue(tenant, Position(batch_id, found["index"], *resume))
    return await item_with_question(services, batch_id, ItemPage.model_validate(small))


@dataclass(frozen=True)
class Results:
    """Finished items as JSON Lines: `lines` streams them; `next_after` is the cursor for the next read."""

    lines: AsyncIterator[bytes]
    next_after: int


async def results(services: Services, batch_id: str, statuses: set[ItemStatus] | None, after: int) -> Results:
    """Every item finished after seq `after` (of these statuses), in finish order, up to a snapshot taken now; once
    the batch has ended, the items that never ran (skipped, cancelled, expired) too, after the others."""
    store = services.store
    row = await store.reads.row(batch_id)  # a snapshot: the cursor covers exactly what is streamed

    async def lines() -> AsyncIterator[bytes]:
        async for ended in store.reads.finished_since(batch_id, after, row):
            chunk = documents.in_finish_order(row, ended)
            wanted = chunk if statuses is None else [found for found in chunk if found["status"] in statuses]
            if wanted:  # a chunk's lines in one piece of the response
                yield b"".join(plain_items.line(found) for found in wanted)

    return Results(lines(), max(after, row.ended_items))


async def batches(
    services: Services,
    caller: Caller,
    status: set[BatchStatus] | None,
    limit: int,
    cursor: str | None,
    where: Filters | None = None,
) -> BatchList:
    """The caller's tenant's batches, newest first, a page at a time; with `where`, only those it keeps (their
    metadata pairs, their creation time)."""
    before = int(cursor) if cursor else None
    found, next_before = await services.store.tenants.batches_of(caller.tenant, before, limit, status, where)
    return BatchList(batches=found, next_cursor=None if next_before is None else str(next_before))


class RecentItem(BaseModel):
    """A finished item, with where it ran and how long it waited for its backend's rate slot."""

    batch_id: str
    index: int
    id: str
    server: str
    tool: str
    status: ItemStatus
    worker: str | None = None
    rate_wait_seconds: float | None = None
    elapsed_seconds: float | None = None
    finished_at: str | None = None


class RecentItems(BaseModel):
    items: list[RecentItem] = Field(description="The newest batch's first, each batch's in finish order.")


async def recent_items(services: Services, caller: Caller, batches: int, per_batch: int) -> RecentItems:
    """The last `per_batch` items that finished in each of the caller's `batches` newest batches (one read of each
    batch's finish order, not of its document)."""
    newest, _ = await services.store.tenants.batches_of(caller.tenant, None, batches, None)
    found = await asyncio.gather(*(_last_finished(services, batch.id, per_batch) for batch in newest if batch.finished))
    return RecentItems(items=[item for items in found for item in items])


async def _last_finished(services: Services, batch_id: str, most: int) -> list[RecentItem]:
    reads, found = services.store.reads, []
    try:
        row = await reads.row(batch_id)
        async for chunk in reads.finished_since(batch_id, max(0, row.finished - most), row):
            ran = [ended for ended in chunk if ended.record is not None]  # an ended batch's unrun items follow
            found += [{"batch_id": batch_id, **item} for item in documents.in_finish_order(row, ran)]
    except BatchNotFound:  # expired since it was listed
        return []
    return [RecentItem.model_validate(item) for item in found]


async def cancel(services: Services, caller: Caller, batch_id: str) -> BatchDocument:
    """Cancel the caller's batch (Forbidden without the `write` right; BatchAlreadyFinished when it has ended) and
    return its document, without results."""
    require(caller, Right.write, "cancelling a batch")
    await services.store.leases.cancel(batch_id)
    return await document(services, batch_id, limit=0)
