"""The event loop's thread declared to sniffio as asyncio's, so anyio need not ask asyncio on every primitive.

anyio (under the MCP SDK and Starlette) finds the running async library through sniffio, and sniffio by asking asyncio
for the running loop. On CPython 3.11 each such question is a `getpid()` system call (asyncio's fork check): dozens
per tool call, a tenth of a worker's CPU per call on a VM where a system call costs a microsecond. sniffio answers a
thread's own declaration first, with one attribute read; the declaration is per thread, so the threads that
`to_thread` runs stay undeclared."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sniffio


@contextmanager
def declared_asyncio() -> Iterator[None]:
    """While inside, the calling thread (an asyncio event loop's) is declared asyncio's; the previous declaration
    comes back on exit."""
    previous = sniffio.thread_local.name
    sniffio.thread_local.name = "asyncio"
    try:
        yield
    finally:
        sniffio.thread_local.name = previous
