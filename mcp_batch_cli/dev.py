"""`mcp-batch dev`: Redis, the API, one worker and the demo backends in one command, for trying it out.

Redis is a private `redis-server` from the PATH on a free loopback port with a temporary directory (nothing kept),
or, where there is none, the Redis MCP_BATCH_REDIS_URL names; with neither, dev says how to get one.

A dev says where it runs in the user's state directory (discovery.py), so the other commands find it without flags;
a second dev finds the first there and stops before starting anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from mcp_batch.errors import ConfigError
from mcp_batch.settings import Settings
from mcp_batch_cli import discovery
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


@asynccontextmanager
async def embedded_redis(workdir: Path) -> AsyncIterator[tuple[str, str]]:
    """Yield (redis URL, description) of a private Redis for this run."""
    binary = shutil.which("redis-server")
    port = free_port()
    if binary:
        proc = subprocess.Popen(  # noqa: ASYNC220 - start-up, before anything else runs
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
        )
        try:
            import redis.asyncio as aioredis

            client = aioredis.Redis(port=port)
            await wait_until(client.ping, 10, "redis-server")
            await client.aclose()
            yield f"redis://127.0.0.1:{port}/0", f"redis-server ({binary}) on port {port}"
        finally:
            proc.terminate()
            proc.wait(5)
        return
    url = os.environ.get("MCP_BATCH_REDIS_URL")
    if url:
        yield url, f"{redacted(url)} (MCP_BATCH_REDIS_URL)"
        return
    raise ConfigError(
        "mcp-batch dev runs a private redis-server, and none is on the PATH: install one (Debian/Ubuntu: "
        "`apt-get install redis-server`; macOS: `brew install redis`), or set MCP_BATCH_REDIS_URL to a Redis you run"
    )


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


async def run_dev(host: str, port: int) -> None:
    """Run everything until interrupted."""
    from service.app import create_app
    from worker.main import create_worker

    # clients on this machine reach an API listening on every address through loopback
    reachable = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{reachable}:{port}"
    async with AsyncExitStack() as stack:
        claim = stack.enter_context(discovery.claimed(base))  # first: a second dev stops here
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-batch-dev-")))
        redis_url, redis_desc = await stack.enter_async_context(embedded_redis(workdir))
        demo_port = free_port()
        os.environ["DEMO_HTTP_PORT"] = str(demo_port)
        await stack.enter_async_context(demo_http_backend(demo_port))
        servers = Path(os.environ.get("MCP_BATCH_SERVERS", workdir / "servers.json"))
        if "MCP_BATCH_SERVERS" not in os.environ:
            servers.write_text(json.dumps(DEV_SERVERS, indent=2))  # noqa: ASYNC240 - start-up
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
        api = uvicorn.Server(config)  # log_config=None: its lines go through the handler `mcp-batch` set up
        print(
            f"\nmcp-batch dev is running at {base}  (docs: {base}/docs)\n"
            f"  dashboard: {base}/ui/\n"
            f"  redis:    {redis_desc}\n"
            f"  servers:  {servers} (demo over stdio, demo_http on port {demo_port})\n"
            f"  try:      curl -s -X POST {base}/v1/batches -H 'content-type: application/json' "
            f"-d @examples/batch.json\n"
            f"  then:     curl -s '{base}/v1/batches/<id>?wait=10'\n\n"
            f"  found by: mcp-batch status, submit, list, watch... without flags ({claim.path})\n\n"
            "  WARNING: AUTH IS OFF (MCP_BATCH_AUTH=none): anyone who can reach this port can run every tool.\n"
            "           This is for development only; in production set MCP_BATCH_KEYS (see `mcp-batch keys new`).\n",
            flush=True,
        )
        try:
            await api.serve()
        finally:
            worker_task.cancel()
            with suppress(asyncio.CancelledError):
                await worker_task
            await worker.close()
