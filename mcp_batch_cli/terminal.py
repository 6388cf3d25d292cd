"""What the client commands show, drawn with rich: a batch's live progress (a bar on a terminal, a line every few
seconds in a log), the item lines of `watch`, and the tables of `list` and `validate`. Ids and messages are shown as
plain text, never read as markup, their control characters escaped (plain_text.py)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mcp_batch.dry_runs import DryRun, Estimate
from mcp_batch.models import BatchDocument, BatchSummary, Counts, ItemResult, ItemStatus
from mcp_batch_cli.plain_text import one_line, printable, safe_json

_STYLES = {ItemStatus.ok: "green", ItemStatus.skipped: "yellow", ItemStatus.cancelled: "yellow"}


def console(stream: IO[str] | None = None) -> Console:
    """A console on `stream` (stdout); off a terminal, wide enough that no table row is wrapped."""
    stream = stream or sys.stdout
    tty = stream.isatty()
    return Console(file=stream, highlight=False, width=None if tty else 200, soft_wrap=not tty)


def done(counts: Counts) -> int:
    return counts.total - counts.pending - counts.running


def progress_line(counts: Counts, elapsed: float | None = None) -> str:
    """`12/40 done, 1 failed, 8.3 calls/s, 1.4s elapsed` (without the rate when the batch's elapsed time is unknown)."""
    finished = done(counts)
    line = f"{finished}/{counts.total} done, {counts.failed} failed"
    if elapsed is None:
        return line
    rate = finished / elapsed if elapsed > 0 else 0.0
    return f"{line}, {rate:.1f} calls/s, {elapsed:.1f}s elapsed"


def summary(document: BatchDocument) -> str:
    c = document.counts
    # Failed for want of the tenant's credential: said apart, since the fix is the tenant's (`credentials set`).
    unauthenticated = f" ({c.unauthenticated} unauthenticated)" if c.unauthenticated else ""
    return (
        f"batch {document.id} {document.status.value}: {c.succeeded} ok, {c.failed} failed{unauthenticated},"
        f" {c.skipped} skipped of {c.total} in {document.elapsed_seconds:.1f}s"
    )


class ProgressView:
    """A batch's progress on a stream (stderr): a rich progress bar on a terminal; otherwise a plain line per update,
    at most every `every` seconds (a log file gets a readable history, not a wall of redraws)."""

    def __init__(self, stream: IO[str], every: float = 5.0, out: IO[str] | None = None) -> None:
        self.stream = stream
        self.out = console(out)  # where `print` writes (stdout)
        self.tty = stream.isatty()
        self.poll = 1.0 if self.tty else every  # how long each long poll may be held: one update per poll
        self.console = Console(file=stream, highlight=False)
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._every = every
        self._printed_at: float | None = None

    def update(self, document: BatchDocument) -> None:
        """Show a document's progress."""
        self.show(document.counts, document.elapsed_seconds)

    def show(self, counts: Counts, elapsed: float | None = None) -> None:
        """Show counts; `elapsed`: the batch's own time so far, when known."""
        line = progress_line(counts, elapsed)
        if not self.tty:
            now = time.monotonic()
            due = self._printed_at is None or now - self._printed_at >= self._every
            if due or done(counts) == counts.total:
                self._printed_at = now
                self.stream.write(line + "\n")
                self.stream.flush()
            return
        if self._bar is None:
            self._bar = Progress(
                BarColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                console=self.console,
                redirect_stdout=self.out.is_terminal,  # lines go above the bar, or to where stdout is sent
            )
            self._bar.start()
            self._task = self._bar.add_task(line, total=counts.total)
        assert self._task is not None
        self._bar.update(self._task, completed=done(counts), total=counts.total, description=line)

    def print(self, text: Text) -> None:
        """A line on stdout: above the bar when both are the terminal."""
        if self._bar is not None and self.out.is_terminal:
            self._bar.console.print(text)
        else:
            self.out.print(text, soft_wrap=True)

    def close(self) -> None:
        """Leave the bar drawn as it ended, so what follows starts on a line of its own."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def item_line(seq: int | None, item_id: str, status: str, server: str, tool: str) -> Text:
    """`     3  error              fetch-2  (demo/fail)` for one finished item."""
    text = Text(f"{seq if seq is not None else '-':>6}  ")
    style = _STYLES.get(ItemStatus(status), "red") if status in set(ItemStatus) else ""
    text.append(f"{one_line(status):<18}", style=style)
    text.append(f" {one_line(item_id)}  ({one_line(server)}/{one_line(tool)})")
    return text


def print_table(out: Console, table: Table) -> None:
    """A table without the padding rich leaves at the end of each line."""
    with out.capture() as captured:
        out.print(table)
    out.file.write("\n".join(line.rstrip() for line in captured.get().splitlines()) + "\n")


def batches_table(batches: Sequence[BatchSummary]) -> Table:
    table = Table("id", "status", "done", "created", "finished", "retry of", box=None, pad_edge=False)
    for b in batches:
        table.add_row(
            Text(one_line(b.id)),
            Text(b.status.value),
            f"{b.finished}/{b.total}",
            Text(one_line(b.created_at)),
            Text(one_line(b.finished_at or "-")),
            Text(one_line(b.retry_of or "-")),
        )
    return table


def dry_run_table(dry_run: DryRun) -> Table:
    """The calls a dry run says would not be dispatched."""
    table = Table("index", "id", "status", "why", box=None, pad_edge=False)
    for r in dry_run.results:
        if r.status is not ItemStatus.pending:
            why = f"{r.error.code}: {r.error.message}" if r.error else ""
            table.add_row(str(r.index), Text(one_line(r.id)), Text(r.status.value, style="red"), Text(one_line(why)))
    return table


def item_view(item: ItemResult) -> list[Text]:
    """An item's status line, its error, then its content: text blocks as they are, other blocks named; the
    structured content when there is no other."""
    took = f", {item.elapsed_seconds:.3f}s" if item.elapsed_seconds is not None else ""
    names = f"{one_line(item.id)} (#{item.index}, {one_line(item.server)}/{one_line(item.tool)}{took})"
    lines = [Text(f"item {names}: {item.status.value}")]
    if item.error is not None:
        lines.append(Text(f"error {one_line(item.error.code)}: {printable(item.error.message)}"))
    for block in item.content or []:
        if block.get("type") == "text":
            lines.append(Text(printable(str(block.get("text", "")))))
        else:
            mime = f", {block['mimeType']}" if isinstance(block.get("mimeType"), str) else ""
            lines.append(Text(one_line(f"[{block.get('type')} block{mime}]")))
    if item.structured_content is not None and not item.content:
        lines.append(Text(safe_json(json.dumps(item.structured_content, indent=2, ensure_ascii=False))))
    return lines


def estimate_line(estimate: Estimate) -> str:
    """The dry run's estimate in one line: the time, what bounds it, and what is not known."""
    if estimate.seconds is None or estimate.bound is None:
        return "estimate: unknown (no limit applies and no call latency is known yet)"
    bound = estimate.bound
    where = f" of {bound.server}" if bound.server else ""
    line = f"estimate: {estimate.seconds:g} s, bound by the {bound.kind.value.replace('_', ' ')}{where}"
    line += f" ({bound.explanation})"
    if not estimate.complete:
        line += f"; at least: no latency known yet for {', '.join(estimate.unknown_latency)}"
    return line
