"""The two streams a command follows: the results' JSON Lines copied as they arrive (`results`, `submit --out`), and
the progress events shown as they happen (`watch`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from rich.text import Text

from mcp_batch.client import Client
from mcp_batch.models import Counts, ItemStatus
from mcp_batch_cli import report, terminal
from mcp_batch_cli.command_errors import CommandError
from mcp_batch_cli.plain_text import one_line, safe_json


def copy_results(
    client: Client, batch_id: str, out: str | None, status: str | None = None, after: int = 0
) -> tuple[int, int | None]:
    """Copy the results' JSON Lines as they arrive; the lines written and the cursor for the next `--after`.

    The file is opened only once the first line (or the end) has come, so a batch that does not exist leaves none.
    Each line is written with its control characters as JSON escapes (plain_text.safe_json)."""
    stream = client.results(batch_id, status=status.split(",") if status else None, after=after)
    lines = stream.lines()
    first = next(lines, None)
    written = 0
    with _sink(out) as sink:
        if first is not None:
            sink.write(_safe(first))
            written = 1
        for line in lines:
            sink.write(_safe(line))
            written += 1
    return written, stream.next_after


def _safe(line: bytes) -> bytes:
    """A JSON line with no control character raw: the same values (a file is printed to a terminal too)."""
    return safe_json(line.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


@contextmanager
def _sink(path: str | None) -> Iterator[IO[bytes]]:
    if path is None:
        sys.stdout.flush()  # the bytes go under the text layer: nothing may be left above them
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    try:
        file = open(path, "wb")  # noqa: SIM115 - opened only once the server has answered, closed below
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror}") from None
    with file:
        yield file


def watch(client: Client, batch_id: str, after: int, as_json: bool, failures_only: bool) -> int:
    """Follow a batch's events to its end: a line per finished item (only the failed ones with `failures_only`),
    under a progress bar on a terminal; with `as_json`, each event as a JSON line. Exit 0 when every item is ok."""
    view = terminal.ProgressView(sys.stderr)
    last = after
    header = not as_json
    try:
        for event in client.events(batch_id, after=after):
            if as_json:
                print(json.dumps({"event": event.name, "id": event.id, "data": event.data}), flush=True)
            elif event.name == "item":
                data = event.data
                if not failures_only or data.get("status") != ItemStatus.ok:
                    if header:
                        view.print(Text(terminal.ITEM_HEADER, style="bold"))
                        header = False
                    index = data.get("index")
                    line = terminal.item_line(
                        index if isinstance(index, int) else None,
                        str(data.get("id")),
                        str(data.get("status")),
                        str(data.get("server")),
                        str(data.get("tool")),
                        report.moment(data.get("finished_at")),
                        report.duration(data.get("elapsed_seconds")),
                    )
                    view.print(line)
            elif event.name == "progress":
                view.show(Counts.model_validate(event.data["counts"]))
            last = event.seq or last
            if event.name == "end":
                view.close()
                counts = Counts.model_validate(event.data["counts"])
                if not as_json:
                    failures = " with failures" if counts.failed else ""
                    status = one_line(str(event.data["status"]))
                    print(f"batch {one_line(batch_id)} {status}{failures}: {report.counts_line(counts)}")
                return 0 if event.data.get("ok") else 3
    except KeyboardInterrupt:
        view.close()
        print(
            f"mcp-batch: stopped watching; the batch runs on. Resume with: mcp-batch watch {batch_id} --after {last}",
            file=sys.stderr,
        )
        return 130
    view.close()
    raise CommandError(f"the event stream of batch {batch_id!r} ended before the batch did")
