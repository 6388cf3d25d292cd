"""A stdio backend's three pipes as one asyncio protocol, and the two streams a ClientSession reads and writes.

The session's receive loop reads lines straight off the process's stdout and each sender writes straight to its
stdin: no pipe tasks and no in-memory stream between them, so a round trip wakes the dispatcher once for the
answer and nothing for the request. Lines are decoded with orjson and validated as the SDK's JSON-RPC message
union; requests are encoded by their own pydantic serializer (the SDK's stdio client does the same work with more
steps). stderr is copied to this process's stderr while its last line is kept, so a failed session can say why.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import suppress
from types import TracebackType
from typing import IO, Any, Self, cast

import anyio
import orjson
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

_LINE_CHARS = 300  # the most of a stderr line a message repeats
_HIGH_LINES = 64  # stdout lines read ahead of the session before the pipe is paused
_LOW_LINES = 16


class StdioProbe:
    """What one stdio session's process did: its exit code, once it exited, and its last line of stderr."""

    def __init__(self) -> None:
        self.exit_code: int | None = None
        self._last = ""
        self._partial = ""
        self._closed = asyncio.Event()

    def feed(self, text: str) -> None:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self._last = line.strip()

    def closed(self) -> None:
        self._closed.set()

    async def last_line(self, wait: float = 1.0) -> str | None:
        """The last non-empty line the process wrote to stderr (waiting up to `wait` for the pipe to close)."""
        with suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._closed.wait()
        line = self._partial.strip() or self._last
        return line[:_LINE_CHARS] or None


class Pipes(asyncio.SubprocessProtocol):
    """The process's stdout split into lines for `Inbound`, its stdin's flow control for `Outbound`, its stderr
    copied to `errlog` and `probe`, and its exit."""

    def __init__(self, probe: StdioProbe, errlog: IO[str]) -> None:
        self.probe = probe
        self.errlog = errlog
        self.transport: asyncio.SubprocessTransport | None = None
        self.lines: deque[bytes] = deque()
        self.eof = False  # stdout closed: no more lines after the queued ones
        self.exited = asyncio.Event()
        self._parts: list[bytes] = []  # the line being received, in pieces (a long one is joined once)
        self._reader: asyncio.Future[None] | None = None
        self._paused = False
        self._dropping = False  # the session is gone: stdout is read only so that the server is never blocked
        self._drained: asyncio.Future[None] | None = None
        self._writing_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # cast, not isinstance: uvloop's process transport does not subclass asyncio's
        self.transport = cast(asyncio.SubprocessTransport, transport)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 2:
            text = data.decode(errors="replace")
            self.probe.feed(text)
            with suppress(Exception):  # a closed or odd errlog must not break the session
                self.errlog.write(text)
                self.errlog.flush()
            return
        if self._dropping:
            return
        if b"\n" not in data:
            self._parts.append(data)
            return
        first, *rest = data.split(b"\n")
        self._parts.append(first)
        head = b"".join(self._parts)
        self._parts = [rest.pop()]  # what follows the last newline: the start of the next line
        self.lines.extend(line for line in (head, *rest) if line.strip())
        if len(self.lines) >= _HIGH_LINES and not self._paused:
            self._pause(True)
        self._wake()

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2:
            self.probe.closed()
        elif fd == 1:
            self.eof = True
            self._wake()
        elif fd == 0:
            self.resume_writing()  # a sender waiting for room learns the pipe is gone

    def process_exited(self) -> None:
        if self.transport is not None:  # uvloop may report a fast exit before connection_made
            self.probe.exit_code = self.transport.get_returncode()
        self.exited.set()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def line(self) -> bytes:
        """The next line of stdout; EndOfStream once it closed and every line was taken."""
        while not self.lines:
            if self.eof:
                raise anyio.EndOfStream
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        if self._paused and len(self.lines) <= _LOW_LINES:
            self._pause(False)
        return self.lines.popleft()

    async def drain(self) -> None:
        """Wait while the stdin pipe's buffer is over its high-water mark."""
        while self._writing_paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def discard(self) -> None:
        """Stop handing lines on: drop the queued ones and keep reading, so a server flushing its output can exit."""
        self.lines.clear()
        self.eof = self._dropping = True
        if self._paused:
            self._pause(False)
        self._wake()

    def _pause(self, paused: bool) -> None:
        self._paused = paused
        stdout = cast(asyncio.ReadTransport | None, self.transport and self.transport.get_pipe_transport(1))
        if stdout is not None and not stdout.is_closing():
            stdout.pause_reading() if paused else stdout.resume_reading()

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)


class Inbound:
    """The session's read stream: each stdout line as a SessionMessage, or the parse error as a value."""

    def __init__(self, pipes: Pipes) -> None:
        self._pipes = pipes
        self._closed = False

    async def receive(self) -> SessionMessage | Exception:
        if self._closed:
            raise anyio.ClosedResourceError
        line = await self._pipes.line()
        try:
            return SessionMessage(jsonrpc_message_adapter.validate_python(orjson.loads(line), by_name=False))
        except ValueError as exc:  # orjson's and pydantic's errors both: the session surfaces it, as the SDK's does
            return exc

    async def aclose(self) -> None:
        self._closed = True

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class Outbound:
    """The session's write stream: each message as one line on stdin. The lines senders give in one turn of the event
    loop go in one write at its end: lanes a round trip's claims start together, and their requests cost the
    backend's pipe one system call (and the backend one wake-up) instead of one each."""

    def __init__(self, pipes: Pipes, stdin: asyncio.WriteTransport) -> None:
        self._pipes = pipes
        self._stdin = stdin
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._lines: list[bytes] = []  # given this turn, not yet written

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._stdin.is_closing():
            raise anyio.BrokenResourceError
        message: Any = item.message
        if not self._lines:
            self._loop.call_soon(self._write)
        self._lines.append(message.__pydantic_serializer__.to_json(message, by_alias=True, exclude_unset=True) + b"\n")
        await self._pipes.drain()

    def _write(self) -> None:
        lines, self._lines = self._lines, []
        if not self._stdin.is_closing():  # a process gone meanwhile: its session fails its calls
            self._stdin.write(b"".join(lines))

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
