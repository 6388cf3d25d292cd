"""A batch's progress as a stream of events: the counts on connecting, each finished item once, in finish order (once
the batch has ended, the items that never ran too), the counts as they change, then the end.

Nothing is published per item. While someone listens, the batch's counters and the length of its `finished` list
are read together (one MULTI round trip, so the counts match the items sent) every `check_seconds`, what finished
since is sent, and the done channel (through `Store.wait`) wakes the stream at once when the batch ends. While items
run, their stored progress is read at the same checks and each new report sent once (`item_progress`). An item's
`seq` (its place in finish order) is the event id: resuming after a seq sends only the items finished after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from mcp_batch.contract import document as documents
from mcp_batch.contract import running
from mcp_batch.contract.plain_items import PlainItem
from mcp_batch.errors import BatchNotFound
from mcp_batch.models import TERMINAL_BATCH
from mcp_batch.store import Store
from service.application.questions import waiting_in
from service.application.services import Services

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    """One event: `item` (with `id`, its seq), `progress`, `item_progress`, `end`, `timeout`, `error`; a `keep-alive`
    has no data."""

    name: str
    data: dict[str, Any] | None = None
    id: int | None = None


KEEP_ALIVE = Event("keep-alive")


def _item_event(item: PlainItem) -> Event:
    seq = item.get("seq")
    fields = {"seq": seq, "index": item["index"], "id": item["id"], "status": item["status"]}
    times = {name: item[name] for name in ("finished_at", "elapsed_seconds") if item.get(name) is not None}
    return Event("item", fields | {"server": item["server"], "tool": item["tool"]} | times, seq)


def _new_reports(reports: dict[int, dict[str, Any]], reported: dict[int, float]) -> list[Event]:
    """An `item_progress` event per item whose report is newer than the last one sent (`reported`, updated)."""
    events = []
    for index, report in sorted(reports.items()):
        if reported.get(index) == report["at"]:
            continue
        reported[index] = report["at"]
        fields = running.shown(report).model_dump(mode="json")
        events.append(Event("item_progress", {"index": index, "id": report["id"], **fields}))
    return events


async def _events(
    store: Store, batch_id: str, after: int, check_seconds: float, max_seconds: float, heartbeat_seconds: float
) -> AsyncIterator[list[Event]]:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + max_seconds
    quiet_since = loop.time()
    position, shown, asked = after, None, set[str]()
    reported: dict[int, float] = {}  # item index -> the time of the last report sent of it
    while True:
        row = await store.reads.row(batch_id)  # its `finished` is the length of the list of finished items
        document = documents.summary(batch_id, row, 0, 0, [])
        ended = document.status in TERMINAL_BATCH
        sent = False
        counts = document.counts.model_dump(mode="json")
        questions = await _questions(store, batch_id, counts, asked) if counts["running"] and not ended else []
        # The first progress comes before the items that finished before the client connected; later ones follow
        # the run of items that changed them.
        first = shown is None
        if first:
            shown, sent = (document.status, counts), True
            yield [Event("progress", {"status": document.status.value, "counts": counts, "metadata": row.metadata})]
        finished = row.ended_items  # once ended, the items that never ran too
        if finished > position:
            async for chunk in store.reads.finished_since(batch_id, position, row):
                yield [_item_event(item) for item in documents.in_finish_order(row, chunk)]
            position, sent = finished, True
        if document.counts.running and not ended:
            news = _new_reports(await store.progress.every(batch_id), reported)
            if news:
                sent = True
                yield news
        if not first and (document.status, counts) != shown:
            shown, sent = (document.status, counts), True
            yield [Event("progress", {"status": document.status.value, "counts": counts})]
        if questions:
            sent = True
            yield questions
        if ended:
            yield [
                Event(
                    "end",
                    {
                        "status": document.status.value,
                        "ok": document.ok,
                        "counts": counts,
                        "finished_at": document.finished_at,
                        "metadata": row.metadata,
                    },
                )
            ]
            return
        now = loop.time()
        if sent:
            quiet_since = now
        elif now - quiet_since >= heartbeat_seconds:
            yield [KEEP_ALIVE]
            quiet_since = now
        if now >= give_up:
            detail = "the stream's time limit was reached: reconnect with Last-Event-ID to resume"
            yield [Event("timeout", {"detail": detail, "after": position})]
            return
        await store.reads.wait(batch_id, min(check_seconds, give_up - now, quiet_since + heartbeat_seconds - now))


async def _questions(store: Store, batch_id: str, counts: dict[str, Any], asked: set[str]) -> list[Event]:
    """An `input_required` event for each question not announced yet; `counts` made to count the waiting items
    apart from the running ones, as the document does."""
    found = await waiting_in(store, batch_id)
    counts["running"] -= len(found)
    counts["input_required"] = len(found)
    events = []
    for index, (item_id, question) in found.items():
        if question.id not in asked:
            asked.add(question.id)
            data = {"index": index, "id": item_id, "request_id": question.id, "kind": question.kind.value}
            events.append(Event("input_required", data | {"expires_at": question.expires_at}))
    return events


async def progress(services: Services, batch_id: str, after: int) -> AsyncIterator[list[Event]]:
    """The events of a batch from the item after seq `after` on, ending with `end` (or `timeout` after the
    stream's time limit, or `error` if storage fails or the batch disappears); a keep-alive after a quiet spell.
    Events come in runs, each ready at once (a chunk of items): a run is one write to the stream."""
    settings = services.settings
    check, most, heartbeat = (
        settings.events_check_seconds,
        settings.events_max_seconds,
        settings.events_heartbeat_seconds,
    )
    try:
        async for events in _events(services.store, batch_id, after, check, most, heartbeat):
            yield events
    except RedisError as exc:
        logger.warning("event stream of batch %s stopped: %s", batch_id, type(exc).__name__)
        yield [Event("error", {"detail": "storage unavailable"})]
    except BatchNotFound:
        yield [Event("error", {"detail": "batch not found (it expired or was removed)"})]
