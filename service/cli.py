"""The `mcp-batch` command: dev (everything in one process), api, worker, demo-backend."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from contextlib import suppress

from .core.errors import ConfigError


def _api(args: argparse.Namespace) -> None:
    import uvicorn

    from .app import create_app

    uvicorn.run(create_app(), host=args.host, port=args.port, proxy_headers=True)


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
    from .dev import run_dev

    asyncio.run(run_dev(args.host, args.port))


def _demo_backend(args: argparse.Namespace) -> None:
    from demo.server import main as demo_main

    demo_main(args.rest)


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

    args = parser.parse_args(argv)
    if args.command != "demo-backend":  # stdout of the stdio backend is the MCP channel
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        for noisy in ("httpx", "httpx2", "mcp"):  # a log line per backend request would cost more than the call
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        args.run(args)
    except ConfigError as exc:
        print(f"mcp-batch: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass
