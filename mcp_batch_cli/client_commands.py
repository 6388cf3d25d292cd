"""The client commands: submit, get, item, results, list, cancel, delete, retry, validate, watch. They talk to a running
server over HTTP through mcp_batch.client, found by --server-url, $MCP_BATCH_SERVER_URL or a running `mcp-batch dev`.

Exit codes, one table for every verb (client_parsers.EXIT_CODES, report.py's names): 0 done (a batch shown ended with
every item ok); 1 the command failed (no server, no such batch); 2 bad usage, or the batch is invalid (nothing was
sent or stored); 3 the batch ended but not every item succeeded (for validate: not every call would be dispatched);
4 the batch shown has not ended yet; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from pydantic import BaseModel

from mcp_batch.client import Client, ClientError, Conflict, Forbidden
from mcp_batch.models import BatchDocument, BatchRequest, BatchStatus, ItemStatus
from mcp_batch_cli import discovery, report, terminal
from mcp_batch_cli.batch_file import is_json_lines, load_batch, readable
from mcp_batch_cli.command_errors import CommandError, explained
from mcp_batch_cli.plain_text import safe_json
from mcp_batch_cli.streams import copy_results, watch


@contextmanager
def connected(args: argparse.Namespace, batch_id: str | None = None, item_id: str | None = None) -> Iterator[Client]:
    """A client of the server the command is pointed at; its errors become the command's messages."""
    url, looked = discovery.server_url(args.server_url)
    key = args.api_key or os.environ.get("MCP_BATCH_API_KEY")
    try:
        with Client(url, api_key=key) as client:
            yield client
    except ClientError as exc:
        raise explained(exc, batch_id, item_id, looked) from None


def print_json(value: BaseModel | dict[str, Any], stream: IO[str] | None = None) -> None:
    """A model as the server sent it: the fields it carried (exclude_unset), nothing the model would add; no control
    character raw (plain_text.safe_json)."""
    body = value.model_dump(mode="json", exclude_unset=True) if isinstance(value, BaseModel) else value
    stream = stream or sys.stdout
    stream.write(safe_json(json.dumps(body, indent=2, ensure_ascii=False)) + "\n")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The batch options given as flags (they override a JSON file's own)."""
    options = {
        "mode": args.mode,
        "on_error": args.on_error,
        "max_concurrency": args.max_concurrency,
        "response_max_bytes": args.response_max_bytes,
        "deadline_seconds": args.deadline_seconds,
        "retention_seconds": args.retention_seconds,
        "webhook_url": args.webhook_url,
        "read_only": False if args.write else None,
        "metadata": dict(args.meta) if args.meta else None,
        "priority": args.priority,
    }
    return {name: value for name, value in options.items() if value is not None}


def _submit(args: argparse.Namespace) -> int:
    lines = is_json_lines(args.file)
    # every check that needs no server, before anything is sent (a JSON Lines file is the server's to check)
    source = readable(args.file) if lines else load_batch(args.file)
    with connected(args) as client:
        key, options = args.idempotency_key, _options(args)
        if isinstance(source, BatchRequest):
            document = client.submit(source, idempotency_key=key, **options)
        else:
            document = client.upload(source, idempotency_key=key, **options)
        return _follow(client, document, args)


def _follow(client: Client, document: BatchDocument, args: argparse.Namespace) -> int:
    """After a submit or retry: print the id and URL, or follow the batch to its end (--wait, --out)."""
    if not (args.wait or args.out):
        if args.json:
            print_json(document)
        else:
            print(document.id)
            print(client.batch_url(document.id))
        return 0
    progress = terminal.ProgressView(sys.stderr)
    progress.update(document)
    try:
        document = client.wait(document.id, progress=progress.update, poll=progress.poll)
    except KeyboardInterrupt:
        progress.close()
        print(f"mcp-batch: stopped waiting; the batch runs on: {client.batch_url(document.id)}", file=sys.stderr)
        return 130
    progress.close()
    if args.out:
        written, _ = copy_results(client, document.id, args.out)
        print(f"{report.summary(document)}; {written} results written to {args.out}")
    else:
        _show(document, args.json, f"mcp-batch get {document.id} --offset {{offset}}")
    return report.exit_code(document)


def _show(document: BatchDocument, as_json: bool, page_hint: str) -> None:
    if as_json:
        print_json(document)
    else:
        report.print_report(terminal.console(), document, page_hint)


def _get(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        if args.wait:
            client.wait(args.id, timeout=args.wait, poll=min(args.wait, 30))
        document = client.get(args.id, offset=args.offset, limit=args.limit)
    limit = f" --limit {args.limit}" if args.limit is not None else ""
    _show(document, args.json, f"mcp-batch get {args.id} --offset {{offset}}{limit}")
    return report.exit_code(document)


def _item(args: argparse.Namespace) -> int:
    with connected(args, args.id, args.item_id) as client:
        item = client.item(args.id, args.item_id)
    if args.json:
        print_json(item)
    else:
        terminal.console().print(*terminal.item_view(item), sep="\n", soft_wrap=True)
    return 0


def _results(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        written, cursor = copy_results(client, args.id, args.out, args.status, args.after or 0)
    if args.out and args.json:
        print(json.dumps({"written": written, "file": args.out, "next_after": cursor}))
    elif args.out:
        print(f"{written} results written to {args.out}; next: --after {cursor}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with connected(args) as client:
        where = {"metadata": dict(args.meta or []), "created_after": args.after, "created_before": args.before}
        page = client.list(status=args.status, limit=args.limit, cursor=args.cursor, **where)
        batches = list(page.batches)
        while args.all and page.next_cursor:
            page = client.list(status=args.status, limit=args.limit, cursor=page.next_cursor, **where)
            batches += page.batches
    if args.json:
        print_json({"batches": [b.model_dump(mode="json") for b in batches], "next_cursor": page.next_cursor})
        return 0
    out = terminal.console()
    if not batches:
        filtered = args.meta or args.after or args.before
        out.print("no batches" + (" that match" if filtered else " in these statuses" if args.status else ""))
    else:
        terminal.print_table(out, terminal.batches_table(batches, report.moment))
    if page.next_cursor:
        out.print(f"more: mcp-batch list --cursor {page.next_cursor} (or --all)")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        try:
            document = client.cancel(args.id)
        except Conflict as exc:
            raise CommandError(f"batch {args.id!r} has already ended ({exc.batch_status}): nothing to cancel") from None
        except Forbidden as exc:
            raise _refused("cancel", args.id, exc) from None
    if args.json:
        print_json(document)
    elif document.status is BatchStatus.cancelling:
        running = document.counts.running
        print(
            f"batch {document.id} is cancelling: nothing new starts; {running} calls in flight finish or are cut "
            "after the grace period"
        )
    else:
        print(f"batch {document.id} {document.status.value}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        try:
            client.delete(args.id)
        except Conflict as exc:
            raise CommandError(
                f"batch {args.id!r} is {exc.batch_status}: only an ended batch can be deleted; cancel it first "
                f"(mcp-batch cancel {args.id})"
            ) from None
        except Forbidden as exc:
            raise _refused("delete", args.id, exc) from None
    if args.json:
        print_json({"id": args.id, "deleted": True})
    else:
        print(f"batch {args.id} deleted")
    return 0


def _refused(what: str, batch_id: str, exc: Forbidden) -> CommandError:
    """A 403 on cancel or delete: the key is read-only for the tenant's batches."""
    why = "; ".join(p.msg for p in exc.problems) or str(exc.detail)
    return CommandError(f"this key may not {what} batch {batch_id!r} ({why}); use a key made with --write")


def _retry(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        try:
            document = client.retry(args.id, idempotency_key=args.idempotency_key)
        except Conflict as exc:
            raise CommandError(f"cannot retry batch {args.id!r}: {exc.detail}") from None
        if not (args.wait or args.out or args.json):
            print(f"batch {document.id} retries the {document.counts.total} unsuccessful items of {args.id}")
            print(client.batch_url(document.id))
            return 0
        return _follow(client, document, args)


def _validate(args: argparse.Namespace) -> int:
    lines = is_json_lines(args.file)
    source = readable(args.file) if lines else load_batch(args.file)
    with connected(args) as client:
        options = _options(args)
        rejected = "the server rejected the batch:"
        try:
            if isinstance(source, BatchRequest):
                dry_run = client.validate(source, **options)
            else:
                dry_run = client.validate_upload(source, **options)
        except ClientError as exc:
            raise explained(exc, rejected=rejected) from None
    refused = [r for r in dry_run.results if r.status is not ItemStatus.pending]
    if args.json:
        print_json(dry_run)
    elif not refused:
        print(f"valid: all {len(dry_run.results)} calls would be dispatched")
    else:
        out = terminal.console()
        out.print(f"{len(refused)} of {len(dry_run.results)} calls would not be dispatched:")
        terminal.print_table(out, terminal.dry_run_table(dry_run))
    if not args.json and dry_run.estimate is not None:
        print(terminal.estimate_line(dry_run.estimate))
    return 0 if dry_run.valid else 3


def _watch(args: argparse.Namespace) -> int:
    with connected(args, args.id) as client:
        return watch(client, args.id, args.after or 0, args.json, args.failures)


def _statuses(value: str) -> str:
    """`--status ok,error`: every name must be an item status."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in set(ItemStatus)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not an item status: {', '.join(unknown) or value!r}")
    return ",".join(names)


def _meta_pair(value: str) -> tuple[str, str]:
    """`--meta job=nightly`: a metadata key and its value (the first `=` divides them)."""
    key, equals, pair = value.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE, e.g. job=nightly")
    return key, pair


def _batch_statuses(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in set(BatchStatus)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not a batch status: {', '.join(unknown) or value!r}")
    return names
