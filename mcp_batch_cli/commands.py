"""The `mcp-batch` command: dev (everything in one process), api, worker, demo-backend; the client commands
submit, get and results, which talk to a running server over HTTP (mcp_batch_cli/remote.py); and status, the operator's
view, read from Redis directly (mcp_batch_cli/status.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

from mcp_batch.errors import ConfigError
from mcp_batch.models import ItemStatus
from mcp_batch.ops import logs
from mcp_batch.tenants import KeyEntry, new_key
from mcp_batch_cli.remote import DEFAULT_SERVER_URL, Progress, Remote, RemoteError, load_batch

_GRACEFUL_SHUTDOWN_SECONDS = 30


def _api(args: argparse.Namespace) -> None:
    import uvicorn

    from service.app import create_app

    # log_config=None: uvicorn's lines go through the handler `main` set up (JSON with MCP_BATCH_LOG_FORMAT=json)
    # Open event streams and long polls get this long to end on a stop; then they are closed (clients resume).
    uvicorn.run(
        create_app(),
        host=args.host,
        port=args.port,
        proxy_headers=True,
        log_config=None,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN_SECONDS,
    )


async def _run_worker() -> None:
    from worker.main import create_worker

    worker = create_worker()  # made inside the running loop: arq binds its signal handlers to it
    try:
        with suppress(asyncio.CancelledError):
            await worker.async_run()
    finally:
        await worker.close()


def _worker(_: argparse.Namespace) -> None:
    with asyncio.Runner(loop_factory=_fast_loop()) as runner:
        runner.run(_run_worker())


def _fast_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed: the worker's per-call overhead is mostly event-loop work."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _dev(args: argparse.Namespace) -> None:
    from mcp_batch_cli.dev import run_dev

    asyncio.run(run_dev(args.host, args.port))


def _demo_backend(args: argparse.Namespace) -> None:
    from demo.server import main as demo_main
    from mcp_batch.ops import tracing

    tracing.configure("mcp-batch-demo")  # the SDK's server spans join the batches' traces when OTEL_* ask for them
    demo_main(args.rest)


def _status(args: argparse.Namespace) -> int:
    from mcp_batch.settings import Settings
    from mcp_batch_cli.status import as_json, as_text, gather

    status = asyncio.run(gather(Settings()))
    if args.json:
        _print_json(as_json(status))
    else:
        print(as_text(status))
    return 0 if status.ok else 1


def _submit(args: argparse.Namespace) -> int:
    batch = load_batch(args.file)  # every check that needs no server, before anything is sent
    with Remote(_server_url(args), api_key=_api_key(args)) as remote:
        document = remote.submit(batch)
        batch_id = document["id"]
        if not (args.wait or args.out):
            print(batch_id)
            print(remote.url(batch_id))
            return 0
        progress = Progress(sys.stderr)
        progress.update(document)
        try:
            for document in remote.wait(batch_id, math.inf, poll=progress.poll, limit=1):
                progress.update(document)
        except KeyboardInterrupt:
            progress.close()
            print(f"mcp-batch: stopped waiting; the batch runs on: {remote.url(batch_id)}", file=sys.stderr)
            return 130
        progress.close()
        if args.out:
            written, _ = _copy_results(remote, batch_id, args.out)
            c = document["counts"]
            print(
                f"batch {batch_id} {document['status']}: {c['succeeded']} ok, {c['failed']} failed,"
                f" {c['skipped']} skipped"
                f" of {c['total']} in {document['elapsed_seconds']:.1f}s; {written} results written to {args.out}"
            )
        else:
            _print_json(remote.document(batch_id))
    return 0 if document["ok"] else 3


def _get(args: argparse.Namespace) -> int:
    with Remote(_server_url(args), api_key=_api_key(args)) as remote:
        if args.wait:
            *_, document = remote.wait(args.id, args.wait)
        else:
            document = remote.document(args.id)
    _print_json(document)
    return 0


def _results(args: argparse.Namespace) -> int:
    with Remote(_server_url(args), api_key=_api_key(args)) as remote:
        written, cursor = _copy_results(remote, args.id, args.out, args.status, args.after)
    if args.out:
        print(f"{written} results written to {args.out}; next: --after {cursor}")
    return 0


def _copy_results(
    remote: Remote, batch_id: str, out: str | None, status: str | None = None, after: int | None = None
) -> tuple[int, int | None]:
    """Copy the results' JSON Lines as they arrive; the lines written and the cursor for the next `--after`."""
    with remote.results(batch_id, status, after) as results, _sink(out) as sink:
        written = 0
        for chunk in results.chunks:
            sink.write(chunk)
            written += chunk.count(b"\n")
    return written, results.next_after


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
        raise RemoteError(f"cannot write {path}: {exc.strerror}") from None
    with file:
        yield file


def _print_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2)
    print()


def _server_url(args: argparse.Namespace) -> str:
    return args.server_url or os.environ.get("MCP_BATCH_SERVER_URL") or DEFAULT_SERVER_URL


def _api_key(args: argparse.Namespace) -> str | None:
    key: str | None = args.api_key or os.environ.get("MCP_BATCH_API_KEY")
    return key


def _keys_new(args: argparse.Namespace) -> int:
    """Print a new key once, and the keys-file line that holds only its hash."""
    key, digest = new_key()
    line: dict[str, Any] = {"sha256": digest, "tenant": args.tenant}
    if args.name:
        line["name"] = args.name
    if args.servers != "*":
        line["servers"] = [name.strip() for name in args.servers.split(",") if name.strip()]
    if args.write:
        line["write"] = True
    for field in ("max_calls_per_batch", "max_unfinished_items", "rate_share"):
        if getattr(args, field) is not None:
            line[field] = getattr(args, field)
    try:
        KeyEntry.model_validate(line)  # the same checks the service makes when it reads the file
    except ValueError as exc:
        raise ConfigError(str(exc).splitlines()[1] if "\n" in str(exc) else str(exc)) from None
    print(f"key: {key}")
    print("(shown once: store it now; the service keeps only its hash)\n")
    print('add this entry to the "keys" list of the keys file (MCP_BATCH_KEYS):')
    print(json.dumps(line))
    return 0


def _statuses(value: str) -> str:
    """`--status ok,error`: every name must be an item status."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in set(ItemStatus)]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not an item status: {', '.join(unknown) or value!r}")
    return ",".join(names)


def _add_client_commands(sub: Any) -> None:
    url_help = f"the mcp-batch server (default: $MCP_BATCH_SERVER_URL, else {DEFAULT_SERVER_URL})"
    key_help = "the API key (default: $MCP_BATCH_API_KEY); needed unless the server runs with MCP_BATCH_AUTH=none"

    submit = sub.add_parser("submit", help="check a batch file and submit it; --wait follows it to the end")
    submit.add_argument("file", metavar="FILE.json", help="a batch in the POST /v1/batches shape, or - for stdin")
    submit.add_argument("--wait", action="store_true", help="show progress on stderr and print the final document")
    submit.add_argument("--out", metavar="FILE", help="write the results as JSON Lines to FILE (implies --wait)")
    submit.add_argument("--server-url", metavar="URL", help=url_help)
    submit.add_argument("--api-key", metavar="KEY", help=key_help)
    submit.set_defaults(run=_submit)

    get = sub.add_parser("get", help="print a batch document")
    get.add_argument("id")
    get.add_argument("--wait", type=float, default=0, metavar="S", help="wait up to S seconds for the batch to end")
    get.add_argument("--server-url", metavar="URL", help=url_help)
    get.add_argument("--api-key", metavar="KEY", help=key_help)
    get.set_defaults(run=_get)

    results = sub.add_parser("results", help="stream a batch's finished items as JSON Lines, in finish order")
    results.add_argument("id")
    results.add_argument("--status", type=_statuses, metavar="S,S", help="only items in these statuses (ok,error)")
    results.add_argument("--after", type=int, metavar="N", help="only items finished after the one with seq N")
    results.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    results.add_argument("--server-url", metavar="URL", help=url_help)
    results.add_argument("--api-key", metavar="KEY", help=key_help)
    results.set_defaults(run=_results)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    parser = argparse.ArgumentParser(prog="mcp-batch", description="Durable batches of MCP tool calls.")
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="run Redis, the API, one worker and the demo backends in one process")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=int, default=8000)
    dev.set_defaults(run=_dev)

    api = sub.add_parser("api", help="run the HTTP API (configured by MCP_BATCH_* variables)")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.set_defaults(run=_api)

    worker = sub.add_parser("worker", help="run one arq worker (run as many as you like)")
    worker.set_defaults(run=_worker)

    demo = sub.add_parser("demo-backend", help="run the demo MCP backend (stdio, or --transport http)")
    demo.add_argument("rest", nargs=argparse.REMAINDER)
    demo.set_defaults(run=_demo_backend)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    new = keys.add_parser("new", help="make a key: print it once, and the keys-file entry with its hash")
    new.add_argument("--tenant", required=True, help="the tenant the key acts for")
    new.add_argument("--name", help="what the key is for")
    new.add_argument("--servers", default="*", metavar="A,B", help="servers it may call (default: all, *)")
    new.add_argument("--write", action="store_true", help="it may run write tools (read_only: false)")
    new.add_argument("--max-calls-per-batch", type=int, metavar="N", help="its own most calls per batch")
    new.add_argument("--max-unfinished-items", type=int, metavar="N", help="its tenant's most unfinished items")
    new.add_argument("--rate-share", type=float, metavar="F", help="its tenant's share of each backend's rate (0-1]")
    new.set_defaults(run=_keys_new)
    status = sub.add_parser(
        "status", help="workers, queue, leases and backends at a glance, from Redis (exit 1: no live worker)"
    )
    status.add_argument("--json", action="store_true", help="print JSON instead of aligned text")
    status.set_defaults(run=_status)

    _add_client_commands(sub)

    args = parser.parse_args(argv)
    # not demo-backend: the stdout of the stdio backend is the MCP channel; not the client commands: they log nothing
    if args.command in {"dev", "api", "worker"}:
        from mcp_batch.settings import get_settings

        logs.configure(get_settings().log_format)
    try:
        code = args.run(args)
    except ConfigError as exc:
        print(f"mcp-batch: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except RemoteError as exc:
        print(f"mcp-batch: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `mcp-batch get ID | head`: the reader has gone; stop quietly, as cat would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
        raise SystemExit(1) from None
    else:
        if code:  # the client commands answer an exit code; the others run until stopped
            raise SystemExit(code)
