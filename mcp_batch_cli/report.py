"""A batch as a person reads it: a status line, the counts with the failures first, a table of the items with each
failed item's error once, and how to read the next page; times as a clock shows them (`12:04:31`, `3.2 s`).

`get` and `submit --wait` print this; `--json` prints the document itself. Text from the server is shown as plain
text, never read as markup, its control characters escaped (plain_text.py).
"""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mcp_batch.models import FAILED_ITEM, TERMINAL_BATCH, BatchDocument, Counts, ItemResult, ItemStatus
from mcp_batch_cli.plain_text import one_line
from mcp_batch_cli.terminal import print_table

# The exit codes of every verb that reports a batch (one table: client_parsers.EXIT_CODES says it in words).
DONE, FAILED, INVALID, NOT_OK, NOT_ENDED, INTERRUPTED = 0, 1, 2, 3, 4, 130

# The counts in the order a person looks for them: what went wrong first, what went right last.
_COUNT_ORDER = (
    "failed",
    "unauthenticated",
    "cancelled",
    "expired",
    "skipped",
    "input_required",
    "running",
    "pending",
    "succeeded",
)
# `unauthenticated` items are among the failed too: said apart, since the fix is the tenant's (`credentials set`).
_COUNT_WORDS = {
    "input_required": "waiting for an answer",
    "succeeded": "ok",
    "unauthenticated": "of them unauthenticated",
}


def duration(seconds: float | None) -> str:
    """`85 ms`, `3.2 s`, `2 min 5 s`, `1 h 4 min`."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def moment(iso: str | None, today: datetime | None = None) -> str:
    """An ISO 8601 time in this machine's time zone: `12:04:31` today, else `2026-12-03 12:04`."""
    if not iso:
        return "-"
    try:
        local = datetime.fromisoformat(iso).astimezone()
    except ValueError:
        return one_line(iso)
    now = today or datetime.now().astimezone()
    return local.strftime("%H:%M:%S") if local.date() == now.date() else local.strftime("%Y-%m-%d %H:%M")


def counts_line(counts: Counts) -> str:
    """`1 failed, 4 ok of 5` (only the states some item is in; failures first)."""
    found = counts.model_dump()
    parts = [f"{found[name]:,} {_COUNT_WORDS.get(name, name)}" for name in _COUNT_ORDER if found.get(name)]
    return f"{', '.join(parts) or 'nothing'} of {counts.total:,}"


def status_line(document: BatchDocument) -> str:
    """`batch 3f2c… completed with failures in 0.5 s` (or `still running, 2.1 s so far`)."""
    state = document.status.value
    if document.status in TERMINAL_BATCH:
        if document.counts.failed:
            state += " with failures"
        elif document.status.value == "completed" and not document.ok:
            state += ", not every call ran"
        return f"batch {one_line(document.id)} {state} in {duration(document.elapsed_seconds)}"
    return f"batch {one_line(document.id)} is {state}, {duration(document.elapsed_seconds)} so far"


def _failed(item: ItemResult) -> bool:
    return item.status in FAILED_ITEM


def items_table(items: list[ItemResult]) -> Table:
    """id, server, tool, status, time; and each failed item's error (its code and message, once)."""
    errors = any(item.error is not None for item in items)
    table = Table("id", "server", "tool", "status", "time", box=None, pad_edge=False)
    if errors:
        table.add_column("error")
    for item in items:
        style = "red" if _failed(item) else "green" if item.status is ItemStatus.ok else "yellow"
        cells: list[Text | str] = [
            Text(one_line(item.id)),
            Text(one_line(item.server)),
            Text(one_line(item.tool)),
            Text(item.status.value, style=style),
            duration(item.elapsed_seconds),
        ]
        if errors:
            cells.append(Text(one_line(f"{item.error.code}: {item.error.message}") if item.error else ""))
        table.add_row(*cells)
    return table


def print_report(out: Console, document: BatchDocument, page_hint: str) -> None:
    """The whole report of `document`'s page; `page_hint`: the command for the next page, `{offset}` in it."""
    out.print(Text(status_line(document)), soft_wrap=True)
    out.print(Text(counts_line(document.counts)), soft_wrap=True)
    if document.results:
        out.print()
        print_table(out, items_table(list(document.results)))
    if document.next_offset is not None:
        shown = f"items {document.results_offset + 1}-{document.next_offset} of {document.counts.total:,}"
        out.print(Text(f"{shown}; more: {page_hint.format(offset=document.next_offset)}"), soft_wrap=True)
    if any(item.truncated for item in document.results):
        out.print(Text(f"shortened to fit: mcp-batch item {one_line(document.id)} ITEM_ID shows one whole"))


def exit_code(document: BatchDocument) -> int:
    """0 when the batch ended with every call ok, 3 when it ended otherwise, 4 while it has not ended."""
    if document.status not in TERMINAL_BATCH:
        return NOT_ENDED
    return DONE if document.ok else NOT_OK


def summary(document: BatchDocument) -> str:
    """The status line and the counts in one line."""
    return f"{status_line(document)}: {counts_line(document.counts)}"
