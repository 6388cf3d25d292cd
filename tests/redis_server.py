"""A redis-server of a test's own: its own port and directory, started, stopped with a signal and started again.

For what the shared test database cannot give: a Redis to stop under the service, persistence modes as operators set
them, and server-wide figures (command counts, memory) that no other test's work disturbs."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path

import pytest

from mcp_batch_cli.dev import free_port

APPEND_ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")


class RedisServer:
    """One redis-server process. `options` are its command-line settings beyond port, address and directory (none:
    nothing is kept on disk)."""

    def __init__(self, directory: Path, options: Sequence[str] = ("--appendonly", "no")) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("needs a redis-server executable to start, stop and restart")
        directory.mkdir(parents=True)
        self.directory = directory
        self.options = list(options)
        self.port = free_port()
        self.output: list[str] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start it (again: same port, same directory, so it replays an append-only file); return once it has loaded
        its data and accepts commands."""
        argv = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory), "--save", ""]
        process = await asyncio.create_subprocess_exec(
            "redis-server", *argv, *self.options, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        assert process.stdout is not None
        self._process = process
        async with asyncio.timeout(20):
            async for line in process.stdout:  # Redis logs this once its data is loaded
                self.output.append(line.decode())
                if b"Ready to accept connections" in line:
                    break
            else:
                raise RuntimeError("redis-server exited:\n" + "".join(self.output[-20:]))
        self._reader = asyncio.create_task(self._read_on(process.stdout))  # a full pipe would block Redis

    async def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM: Redis flushes its append-only file and exits. SIGKILL: a crash."""
        if self._process is None or self._process.returncode is not None:
            return
        self._process.send_signal(how)
        async with asyncio.timeout(20):
            await self._process.wait()
            if self._reader is not None:
                await self._reader

    async def _read_on(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            self.output.append(line.decode())
