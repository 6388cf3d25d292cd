"""The stdio transport: a backend's process started by asyncio, its pipes handed to the SDK's ClientSession.

A `Transport` as the SDK defines it (`mcp.client.Transport`: an async context manager yielding a read and a write
stream), so the session, its dispatcher and every protocol behaviour (progress, questions, cancellation, the
input-required driver) stay the SDK's; only the pipes are ours (backends/stdio_pipes.py). It starts the process
itself, so a failed session can give the exit code and the last line of stderr without wrapping an SDK internal.

Stopping follows the MCP lifecycle as the SDK's stdio client does: close stdin, give the server a grace period to
exit, then SIGTERM its process group and, past a second period, SIGKILL. The stop runs to its end even when the
owner is cancelled, so a server process is never left behind. POSIX only (start_new_session, killpg).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import IO, cast

import anyio
from mcp.client.stdio import get_default_environment

from mcp_batch.backends.stdio_pipes import Inbound, Outbound, Pipes, StdioProbe

logger = logging.getLogger(__name__)

_EXIT_SECONDS = 2.0  # grace period after stdin closes, and again after SIGTERM (the SDK's own figures)
_KILL_SECONDS = 2.0  # for the loop to see a SIGKILL land
_stopping: set[asyncio.Task[None]] = set()  # stops outliving a cancelled owner, held until they finish


class StdioTransport:
    """The stdio backend `command args` as an MCP transport; `probe` learns its exit code and last stderr line."""

    def __init__(
        self,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str | Path | None,
        probe: StdioProbe,
        errlog: IO[str] = sys.stderr,
    ) -> None:
        self.command = command
        self.args = args
        self.env = env
        self.cwd = cwd
        self.probe = probe
        self.errlog = errlog
        self._process: asyncio.SubprocessTransport | None = None
        self._pipes: Pipes | None = None

    async def __aenter__(self) -> tuple[Inbound, Outbound]:
        loop = asyncio.get_running_loop()
        process, pipes = await loop.subprocess_exec(
            lambda: Pipes(self.probe, self.errlog),
            self.command,
            *self.args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=get_default_environment() | self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group: the stop reaches the server's children too
        )
        self._process, self._pipes = process, pipes
        if self.probe.exit_code is None and process.get_returncode() is not None:
            self.probe.exit_code = process.get_returncode()  # exited before the protocol saw its transport
        return Inbound(pipes), Outbound(pipes, cast(asyncio.WriteTransport, process.get_pipe_transport(0)))

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        process, pipes = self._process, self._pipes
        if process is None or pipes is None:
            return
        self._process = self._pipes = None
        stop = asyncio.ensure_future(_stop(process, pipes))
        _stopping.add(stop)
        stop.add_done_callback(_stopping.discard)
        with anyio.CancelScope(shield=True):  # and asyncio.shield: a native cancel must not abandon the process
            await asyncio.shield(stop)


async def _stop(process: asyncio.SubprocessTransport, pipes: Pipes) -> None:
    pipes.discard()
    stdin = process.get_pipe_transport(0)
    if stdin is not None:
        stdin.close()  # what is still buffered is written first
    if not await _exited(pipes, _EXIT_SECONDS):
        _signal(process, signal.SIGTERM)
        if not await _exited(pipes, _EXIT_SECONDS):
            _signal(process, signal.SIGKILL)
            if not await _exited(pipes, _KILL_SECONDS):
                logger.warning("stdio server %d is still alive after SIGKILL; abandoning it", process.get_pid())
    process.close()


async def _exited(pipes: Pipes, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            await pipes.exited.wait()
    except TimeoutError:
        return False
    return True


def _signal(process: asyncio.SubprocessTransport, sig: signal.Signals) -> None:
    try:
        os.killpg(process.get_pid(), sig)
    except ProcessLookupError:
        pass  # the group is gone already
    except PermissionError:  # a member changed its credentials: signal the server itself
        with suppress(ProcessLookupError, PermissionError):
            process.send_signal(sig)
