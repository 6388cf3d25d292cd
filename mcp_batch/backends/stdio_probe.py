"""A stdio backend's exit code and its last line of stderr, so a session that failed can say why in words.

The SDK's stdio client keeps its child process to itself. Its process factory
(`mcp.client.stdio._create_platform_compatible_process`, SDK 2.x) is wrapped once here: a process started while a
probe is being watched is recorded on the probe, and its stderr goes through a pipe whose last line is kept (every
byte still copied to this process's stderr, where the backend's logs went before).
tests/mcp_batch/backends/test_stdio_probe.py fails if the SDK changes under it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import IO, Any, TextIO

import mcp.client.stdio as sdk_stdio

_LINE_CHARS = 300  # the most of a stderr line a message repeats


class StdioProbe:
    """What one stdio session's process did: its exit code, once it exited, and its last line of stderr."""

    def __init__(self) -> None:
        self.process: Any = None  # the SDK's process object (anyio's Process on POSIX)
        self._last = ""
        self._partial = ""
        self._closed = asyncio.Event()

    @property
    def exit_code(self) -> int | None:
        code = getattr(self.process, "returncode", None)
        return code if isinstance(code, int) else None

    def _feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self._last = line.strip()

    async def last_line(self, wait: float = 1.0) -> str | None:
        """The last non-empty line the process wrote to stderr (waiting up to `wait` for the pipe to close)."""
        with suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._closed.wait()
        line = self._partial.strip() or self._last
        return line[:_LINE_CHARS] or None


class _StderrCopy(asyncio.Protocol):
    def __init__(self, probe: StdioProbe, errlog: IO[str]) -> None:
        self.probe = probe
        self.errlog = errlog

    def data_received(self, data: bytes) -> None:
        text = data.decode(errors="replace")
        self.probe._feed(text)
        with suppress(Exception):  # a closed or odd errlog must not break the session
            self.errlog.write(text)
            self.errlog.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.probe._closed.set()


_watching: ContextVar[StdioProbe | None] = ContextVar("stdio_probe", default=None)
_original = sdk_stdio._create_platform_compatible_process


async def _spawn(
    command: str, args: list[str], env: dict[str, str] | None = None, errlog: TextIO = sys.stderr, cwd: Any = None
) -> Any:
    probe = _watching.get()
    if probe is None:
        return await _original(command=command, args=args, env=env, errlog=errlog, cwd=cwd)
    read_fd, write_fd = os.pipe()
    try:
        with os.fdopen(write_fd, "w") as child_stderr:  # this end is closed once the child holds its own copy
            process = await _original(command=command, args=args, env=env, errlog=child_stderr, cwd=cwd)
    except BaseException:
        os.close(read_fd)
        raise
    probe.process = process
    reader = os.fdopen(read_fd, "rb", buffering=0)
    await asyncio.get_running_loop().connect_read_pipe(lambda: _StderrCopy(probe, errlog), reader)
    return process


def install() -> None:
    """Wrap the SDK's process factory (once)."""
    if sdk_stdio._create_platform_compatible_process is not _spawn:
        sdk_stdio._create_platform_compatible_process = _spawn


@contextmanager
def watching(probe: StdioProbe) -> Iterator[StdioProbe]:
    """Record on `probe` the stdio process started in this block (by this task)."""
    install()
    token = _watching.set(probe)
    try:
        yield probe
    finally:
        _watching.reset(token)
