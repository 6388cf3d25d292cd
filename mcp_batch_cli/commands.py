"""The `mcp-batch` command: dev (everything in one process), api, worker, demo-backend, keys; the client commands
(client_parsers.py, client_commands.py), which talk to a running server over HTTP through mcp_batch.client; and
status, the operator's view, read from Redis directly (status.py). A running `dev` is found without flags
(discovery.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from mcp_batch.errors import ConfigError
from mcp_batch.ops import logs
from mcp_batch.settings import Settings
from mcp_batch.tenants import KeyEntry, new_key
from mcp_batch_cli.client_parsers import HelpFormatter, add_client_commands, command
from mcp_batch_cli.command_errors import CommandError
from mcp_batch_cli.credentials import add_credential_commands
from mcp_batch_cli.plain_text import printable
from mcp_batch_cli.questions import add_question_commands

_GRACEFUL_SHUTDOWN_SECONDS = 30
RUNS_UNTIL_STOPPED = (
    "runs until stopped (Ctrl-C or SIGTERM: in-flight work is finished or handed back); exit 2 for bad configuration"
)


def _api(args: argparse.Namespace) -> None:
    import uvicorn

    from service.app import create_app

    # log_config=None: uvicorn's lines go through the handler `main` set up (JSON with MCP_BATCH_LOG_FORMAT=json)
    # Open event streams and long polls get this long to end on a stop; then they are closed (clients resume).
    uvicorn.run(
        create_app(served_host=args.host),
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


def _status(args: argparse.Namespace) -> int:
    from mcp_batch_cli.status import as_json, as_text, gather, operator_settings

    settings, found = operator_settings()
    status = asyncio.run(gather(settings, found))
    if args.json:
        json.dump(as_json(status), sys.stdout, indent=2)
        print()
    else:
        print(printable(as_text(status)))  # backends' errors are shown: a backend writes them
    return 0 if status.ok else 1


def _keys_new(args: argparse.Namespace) -> int:
    """Print a new key once, and the keys-file line that holds only its hash."""
    key, digest = new_key()
    line: dict[str, Any] = {"sha256": digest, "tenant": args.tenant}
    if args.name:
        line["name"] = args.name
    if args.servers != "*":
        line["servers"] = [name.strip() for name in args.servers.split(",") if name.strip()]
    for right in ("write", "credentials", "admin"):
        if getattr(args, right):
            line[right] = True
    for field in ("max_calls_per_batch", "max_unfinished_items", "max_stored_bytes", "rate_share"):
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


def _add_process_commands(sub: Any) -> None:
    dev = command(
        sub,
        "dev",
        "run Redis, the API, one worker and the demo backends in one process, for trying it out",
        "Auth is off. Redis is a private redis-server from the PATH (else $MCP_BATCH_REDIS_URL); the client commands "
        "and `status` find this dev without flags. One dev at a time: a second one says where the first runs.",
        RUNS_UNTIL_STOPPED,
    )
    dev.add_argument("--host", default="127.0.0.1", help="the address the API listens on (default: 127.0.0.1)")
    dev.add_argument("--port", type=int, default=8000, help="the API's port (default: 8000)")
    dev.set_defaults(run=_dev)

    api = command(
        sub,
        "api",
        "run the HTTP API",
        "Configured by MCP_BATCH_* variables (docs/configuration.md): Redis, the servers file, the keys file.",
        RUNS_UNTIL_STOPPED,
    )
    api.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    api.add_argument("--port", type=int, default=8000, help="the port to listen on (default: 8000)")
    api.set_defaults(run=_api)

    metrics = Settings.model_fields["worker_metrics_port"].default
    worker = command(
        sub,
        "worker",
        "run one arq worker (run as many as you like)",
        "Configured by MCP_BATCH_* variables, as the API is; its Prometheus metrics are served on "
        f"MCP_BATCH_WORKER_METRICS_HOST:MCP_BATCH_WORKER_METRICS_PORT (default: 127.0.0.1:{metrics}).",
        RUNS_UNTIL_STOPPED,
    )
    worker.set_defaults(run=_worker)

    # Listed here for the overview; main() hands its arguments to the demo server, whose --help shows them.
    sub.add_parser("demo-backend", help="run the demo MCP backend (stdio, or --transport http; --help for its options)")

    keys = command(sub, "keys", "manage API keys", exit_codes=None).add_subparsers(dest="keys_command", required=True)
    new = command(keys, "new", "make a key: print it once, and the keys-file entry with its hash", exit_codes=None)
    new.add_argument("--tenant", required=True, help="the tenant the key acts for (required)")
    new.add_argument("--name", help="what the key is for (default: none)")
    new.add_argument("--servers", default="*", metavar="A,B", help="servers it may call (default: all, *)")
    new.add_argument(
        "--write", action="store_true", help="it may run write tools and cancel or delete batches (default: no)"
    )
    new.add_argument("--credentials", action="store_true", help="it may set the tenant's backend credentials (no)")
    new.add_argument("--admin", action="store_true", help="it may use the operator's routes (default: no)")
    new.add_argument("--max-calls-per-batch", type=int, metavar="N", help="its own most calls per batch (the server's)")
    new.add_argument(
        "--max-unfinished-items", type=int, metavar="N", help="its tenant's most unfinished items (the server's)"
    )
    new.add_argument("--max-stored-bytes", type=int, metavar="N", help="its tenant's most bytes of stored calls")
    new.add_argument("--rate-share", type=float, metavar="F", help="its tenant's share of each backend's rate, (0-1]")
    new.set_defaults(run=_keys_new)

    status = command(
        sub,
        "status",
        "workers, queue, leases and backends at a glance, read from Redis",
        "Redis is $MCP_BATCH_REDIS_URL, else the running `mcp-batch dev`'s, else the default.",
        "exit codes: 0 a worker is alive; 1 none is, or Redis cannot be reached",
    )
    status.add_argument("--json", action="store_true", help="print JSON instead of aligned text")
    status.set_defaults(run=_status)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-batch", description="Durable batches of MCP tool calls.", formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_process_commands(sub)
    add_client_commands(sub)
    add_question_commands(sub)
    add_credential_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo-backend"]:  # every argument is the demo server's, --help included
        from demo.server import main as demo_main
        from mcp_batch.ops import tracing

        tracing.configure("mcp-batch-demo")  # the SDK's server spans join the batches' traces when OTEL_* ask
        demo_main(argv[1:])
        return
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the verb, with its own usage line, not the command's
        getattr(args, "verb_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    # not demo-backend: the stdout of the stdio backend is the MCP channel; not the client commands: they log nothing
    if args.command in {"dev", "api", "worker"}:
        from mcp_batch.settings import get_settings

        logs.configure(get_settings().log_format)
    try:
        code = args.run(args)
    except ConfigError as exc:
        print(f"mcp-batch: configuration error: {printable(str(exc))}", file=sys.stderr)
        raise SystemExit(2) from None
    except CommandError as exc:  # its message may quote the server's, and so a backend's
        print(f"mcp-batch: {printable(str(exc))}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `mcp-batch get ID | head`: the reader has gone; stop quietly, as cat would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
        raise SystemExit(1) from None
    else:
        if code:  # the client commands answer an exit code; the others run until stopped
            raise SystemExit(code)
