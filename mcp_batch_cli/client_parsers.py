"""The arguments of the client commands, each with its help text and default."""

from __future__ import annotations

import argparse
from typing import Any

from rich_argparse import RichHelpFormatter

from mcp_batch.settings import Settings
from mcp_batch_cli import client_commands as run
from mcp_batch_cli.discovery import DEFAULT_SERVER_URL, state_file

URL_HELP = (
    "the mcp-batch server (default: $MCP_BATCH_SERVER_URL, else the `mcp-batch dev` running on this machine, "
    f"found in {state_file()}, else {DEFAULT_SERVER_URL})"
)
KEY_HELP = "the API key (default: $MCP_BATCH_API_KEY); needed unless the server runs with MCP_BATCH_AUTH=none"


def _as_written(name: str) -> str:
    return name[:1].upper() + name[1:]


class HelpFormatter(RichHelpFormatter):
    """rich's help, with the group names as written (rich_argparse Title Cases them)."""

    group_name_formatter = _as_written


_DEFAULTS = {name: field.default for name, field in Settings.model_fields.items()}
EXIT_CODES = (
    "exit codes: 0 done (a batch shown ended with every call ok); 1 failed (no server, no such batch); "
    "2 bad usage or an invalid batch, nothing stored; 3 the batch ended with calls that did not succeed; "
    "4 the batch has not ended yet; 130 interrupted"
)


def command(
    sub: Any, name: str, summary: str, details: str = "", exit_codes: str | None = EXIT_CODES
) -> argparse.ArgumentParser:
    """A subcommand whose help shows `summary`, `details` and its exit codes."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}." + (f" {details}" if details else ""),
        epilog=exit_codes,
        formatter_class=HelpFormatter,
    )
    parser.set_defaults(verb_parser=parser)  # the innermost verb's: it reports arguments it does not take
    return parser


def server_options(parser: argparse.ArgumentParser, as_json: str | None = None) -> None:
    """--server-url and --api-key, and --json with its help when given."""
    parser.add_argument("--server-url", metavar="URL", help=URL_HELP)
    parser.add_argument("--api-key", metavar="KEY", help=KEY_HELP)
    if as_json:
        parser.add_argument("--json", action="store_true", help=as_json)


def _batch_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("batch options (override a JSON file's own; the only way for a JSON Lines file)")
    group.add_argument("--mode", choices=["concurrent", "serial"], help="how calls are scheduled (default: concurrent)")
    group.add_argument(
        "--on-error", choices=["continue", "stop"], help="stop: nothing new starts after a failure (default: continue)"
    )
    concurrency, budget = _DEFAULTS["default_max_concurrency"], _DEFAULTS["response_max_bytes"]
    group.add_argument(
        "--max-concurrency", type=int, metavar="N", help=f"calls in flight at once (default: {concurrency})"
    )
    group.add_argument("--write", action="store_true", help="run write tools too: read_only false (default: read-only)")
    group.add_argument(
        "--priority",
        choices=["low", "normal", "high"],
        help="against the tenant's other batches on a shared backend (default: normal)",
    )
    group.add_argument(
        "--response-max-bytes", type=int, metavar="N", help=f"byte budget of a document's results (default: {budget})"
    )
    group.add_argument(
        "--deadline-seconds", type=float, metavar="S", help="unfinished items expire S seconds after submit (none)"
    )
    group.add_argument(
        "--retention-seconds",
        type=int,
        metavar="S",
        help=f"keep the finished batch S seconds (default: the server's, {_DEFAULTS['retention_seconds']})",
    )
    group.add_argument("--webhook-url", metavar="URL", help="POSTed a signed summary when the batch ends (none)")
    group.add_argument(
        "--meta",
        type=run._meta_pair,
        action="append",
        metavar="KEY=VALUE",
        help="a metadata pair to find the batch by later (repeat it; they replace a JSON file's metadata)",
    )


def _follow_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", action="store_true", help="show progress on stderr and print the batch once it ends (default: no)"
    )
    parser.add_argument("--out", metavar="FILE", help="write the results as JSON Lines to FILE (implies --wait)")
    parser.add_argument(
        "--idempotency-key", metavar="KEY", help="the same key again answers with the first batch (default: none)"
    )


def add_client_commands(sub: Any) -> None:
    submit = command(
        sub,
        "submit",
        "check a batch file and submit it; --wait follows it to the end",
        "FILE.json is a POST /v1/batches body; FILE.jsonl (or .ndjson) holds one call per line and is sent as it is, "
        "checked line by line by the server. Prints the batch id and its URL.",
    )
    submit.add_argument("file", metavar="FILE", help="a .json batch, a .jsonl file of calls, or - for JSON on stdin")
    _follow_options(submit)
    _batch_options(submit)
    server_options(submit, "print the document as JSON (default: the id and URL; with --wait, a report)")
    submit.set_defaults(run=run._submit)

    get = command(
        sub,
        "get",
        "show a batch: its status, counts and a page of its items",
        "Failures first, each failed item's error once; one page of items, fitted to the batch's byte budget.",
    )
    get.add_argument("id", help="the batch id")
    get.add_argument(
        "--wait", type=float, default=0, metavar="S", help="wait up to S seconds for the batch to end (default: 0)"
    )
    get.add_argument("--offset", type=int, default=0, metavar="N", help="the page from item N (default: 0)")
    get.add_argument("--limit", type=int, metavar="N", help="at most N items in the page (default: what fits)")
    server_options(get, "print the batch document as JSON (default: a report)")
    get.set_defaults(run=run._get)

    item = command(
        sub, "item", "show one item of a batch, whole, by its id", "Large content is fetched page by page and joined."
    )
    item.add_argument("id", help="the batch id")
    item.add_argument("item_id", metavar="ITEM_ID", help="the call's id (or its index, when it gave none)")
    server_options(item, "print the item as JSON (default: its status, error and text content)")
    item.set_defaults(run=run._item)

    results = command(sub, "results", "stream a batch's finished items as JSON Lines, in finish order")
    results.add_argument("id", help="the batch id")
    results.add_argument(
        "--status", type=run._statuses, metavar="S,S", help="only items in these statuses, e.g. error,timeout (all)"
    )
    results.add_argument("--after", type=int, metavar="N", help="only items finished after the one with seq N (0)")
    results.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    server_options(results, "with --out, print what was written as JSON (the lines are JSON either way)")
    results.set_defaults(run=run._results)

    listing = command(sub, "list", "list your batches, newest first")
    listing.add_argument(
        "--status", type=run._batch_statuses, metavar="S,S", help="only batches in these statuses, e.g. running (all)"
    )
    listing.add_argument("--limit", type=int, default=20, metavar="N", help="batches per page (default: 20)")
    listing.add_argument("--cursor", metavar="C", help="the page after this cursor (printed under the last page)")
    listing.add_argument("--all", action="store_true", help="every page, not only the first (default: no)")
    listing.add_argument(
        "--meta",
        type=run._meta_pair,
        action="append",
        metavar="KEY=VALUE",
        help="only batches with this metadata pair (repeat it: every pair must match)",
    )
    moment = "an RFC 3339 date-time with its offset (2026-12-01T08:00:00Z) or epoch seconds"
    listing.add_argument("--after", metavar="TIME", help=f"only batches created after TIME: {moment}")
    listing.add_argument("--before", metavar="TIME", help=f"only batches created before TIME: {moment}")
    server_options(listing, "print the list as JSON (default: a table)")
    listing.set_defaults(run=run._list)

    cancel = command(
        sub, "cancel", "cancel a batch", "Nothing new starts; calls in flight finish or are cut after the grace period."
    )
    cancel.add_argument("id", help="the batch id")
    server_options(cancel, "print the document as JSON (default: one line)")
    cancel.set_defaults(run=run._cancel)

    delete = command(
        sub,
        "delete",
        "delete an ended batch, whole",
        "Its calls, results and Idempotency-Key go; a webhook not yet delivered is dropped. A running batch is "
        "refused: cancel it first.",
    )
    delete.add_argument("id", help="the batch id")
    server_options(delete, "print {id, deleted} as JSON (default: one line)")
    delete.set_defaults(run=run._delete)

    retry = command(
        sub, "retry", "submit a new batch of a finished batch's items that did not succeed", "It links back: retry_of."
    )
    retry.add_argument("id", help="the finished batch's id")
    _follow_options(retry)
    server_options(retry, "print the new batch's document as JSON (default: its id and URL)")
    retry.set_defaults(run=run._retry)

    validate = command(
        sub,
        "validate",
        "dry-run a batch file: every check a submit makes, and what would become of each call",
        "Nothing is stored or queued. Exit 3 when some call would not be dispatched (unknown server or tool...).",
    )
    validate.add_argument("file", metavar="FILE", help="a .json batch, a .jsonl file of calls, or - for stdin")
    _batch_options(validate)
    server_options(validate, "print the dry run as JSON (default: a table of the calls that would not run)")
    validate.set_defaults(run=run._validate)

    watch = command(
        sub,
        "watch",
        "follow a batch live: a line per finished item, a progress bar on a terminal, to its end",
        "The event stream (SSE); a broken stream is resumed where it stopped. Ctrl-C stops watching, not the batch.",
    )
    watch.add_argument("id", help="the batch id")
    watch.add_argument("--after", type=int, metavar="N", help="start after the item with seq N (default: 0, all)")
    watch.add_argument("--failures", action="store_true", help="show only the items that did not succeed")
    server_options(watch, "print each event as a JSON line (event, id, data)")
    watch.set_defaults(run=run._watch)
