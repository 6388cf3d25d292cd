"""One long-lived MCP client session per backend for a worker process, reopened when it breaks.

Each session is owned by its own task, which enters and leaves the SDK client's context (anyio requires both in
one task); items on any task call through it concurrently. A call that finds the session dead (the stdio process
exited, the HTTP server went away) fails and the next call opens a fresh session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.connect import HttpOutcome, connect, http_outcome, list_tools
from mcp_batch.backends.failures import describe
from mcp_batch.backends.servers_file import Backend, Registry
from mcp_batch.contract.checks import Bounds
from mcp_batch.errors import BackendError, BackendThrottled, BackendTimeout, BackendUnauthenticated
from worker.admission import Gate
from worker.backend_logs import BackendLogs
from worker.questions import Seats, current
from worker.tool_call import call_tool

logger = logging.getLogger(__name__)

_STOP_SECONDS = 10.0  # longest a cancelled session's owner gets to close its client (the SDK kills within ~4 s)
_PING_SECONDS = 5.0  # after a timeout, how long a backend has to prove it is still alive


class BackendSession:
    """A live client session to one backend, with its tool list."""

    def __init__(self, name: str, backend: Backend, connect_timeout: float, call_timeout: float) -> None:
        self.name = name
        self.backend = backend
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.client: Client | None = None
        self.tools: dict[str, ToolInfo] = {}
        self.listed_at = 0.0  # when `tools` was last listed
        self.suspect = False  # set when a call timed out; the next user pings before trusting the session
        self.seats = Seats()  # the calls in flight, which a backend's question may be for
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self.logs = BackendLogs(name)

    async def open(self) -> None:
        """Start the owner task and wait until the session is initialized and its tools are listed."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Read by whoever is waiting; one that gave up (a timeout, a cancel) must not leave it unretrieved.
        ready.add_done_callback(lambda done: done.cancelled() or done.exception())
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp-session:{self.name}")
        try:  # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancel that comes as `ready` resolves
            async with asyncio.timeout(self.connect_timeout):
                await asyncio.shield(ready)
        except TimeoutError:
            await self.close(wait=0.0)  # still starting: stop it now (a stdio process is reaped by its owner)
            raise BackendError(f"the session did not open within {self.connect_timeout:g}s") from None
        except BaseException:
            await self.close(wait=0.0)
            raise

    async def _own(self, ready: asyncio.Future[None]) -> None:
        outcome = HttpOutcome()
        http_outcome.set(outcome)  # this task's own context: records a 401/403 answered to the handshake
        current.set(None)  # copied from the item that opened it: a question on this task is no item's by that
        try:
            async with connect(
                self.backend, self.call_timeout, self.seats, self.logs.received, self.logs.level
            ) as client:
                self.tools = {t.name: t for t in await list_tools(client)}
                self.client = client
                self.listed_at = time.monotonic()
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # the owner must never die silently: hand the failure to open()
            # connect() says why in words (a BackendError); anything else is a bug or a cancel, named by its type.
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else BackendError("session cancelled"))
            elif not isinstance(exc, asyncio.CancelledError):
                said = str(exc) if isinstance(exc, BackendError) else type(exc).__name__
                logger.warning("session to %s ended: %s", self.name, said)
        finally:
            self.client = None

    async def close(self, wait: float = 5.0) -> None:
        """End the session: its owner leaves the client's context within `wait` seconds, or is cancelled."""
        self._closing.set()
        owner, self._owner = self._owner, None
        if owner is None or owner.done():
            return
        try:  # asyncio.wait, not wait_for: wait_for would wait without bound for a cancelled owner to finish
            await asyncio.wait({owner}, timeout=wait)
        finally:
            if not owner.done():
                owner.cancel()
                # Bounded: a session cancelled while its process was still starting must not hold a stop forever.
                await asyncio.wait({owner}, timeout=_STOP_SECONDS)
                if not owner.done():
                    logger.warning("session to %s did not stop; abandoning it", self.name)

    @property
    def alive(self) -> bool:
        return self.client is not None and not self._closing.is_set()

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout: float, progress: ProgressFnT | None = None
    ) -> CallToolResult:
        """Call a tool (`progress`: called with each progress notification of this call); BackendTimeout past
        `timeout`, BackendError when the session broke."""
        client = self.client
        if client is None:  # another call broke it since this one was handed the session
            raise BackendError(f"session to {self.name!r} is closed", transient=True)
        outcome = HttpOutcome()
        token = http_outcome.set(outcome)
        item = self.logs.sending()
        try:
            async with asyncio.timeout(timeout) as timer:  # no extra task per call, unlike wait_for
                seat = self.seats.sit(timer)
                try:
                    return await call_tool(client, tool, arguments, progress)
                finally:
                    self.seats.leave(seat)
        except TimeoutError:
            self.suspect = True
            raise BackendTimeout(f"{self.name!r} did not answer {tool!r} within {timeout:g}s") from None
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                await self.close()
                raise BackendError(f"connection to {self.name!r} closed during the call", transient=True) from None
            if outcome.status == 429:
                raise BackendThrottled(f"{self.name!r} refused the call (HTTP 429)", outcome.retry_after) from None
            if outcome.status in (401, 403):
                raise BackendUnauthenticated(f"{self.name!r} refused the credentials (HTTP {outcome.status})") from None
            if outcome.status is not None:  # a 5xx is the backend's trouble of the moment; another 4xx is the call's
                status = outcome.status
                raise BackendError(f"{self.name!r} answered HTTP {status}", transient=status >= 500) from None
            raise BackendError(f"{self.name!r} answered {tool!r} with protocol error {exc.error.code}") from None
        except (OSError, EOFError, ConnectionError, BaseExceptionGroup) as exc:
            await self.close()
            said = describe(exc, self.backend, "the call was in flight")
            raise BackendError(f"connection to {self.name!r} failed: {said}", transient=True) from None
        finally:
            http_outcome.reset(token)
            self.logs.answered(item)

    async def ping(self, timeout: float) -> bool:
        client = self.client
        if client is None:
            return False
        try:
            async with asyncio.timeout(timeout):
                await client.send_ping()
        except MCPError:
            return True  # it answered, if only to say it has no ping: alive
        except Exception:
            return False
        return True


class SessionPool:
    """Sessions per backend for one worker process; opened lazily, reopened after a break."""

    def __init__(
        self,
        registry: Registry,
        catalog: Catalog,
        gate: Gate,
        connect_timeout: float,
        default_timeout: float,
        max_limit_wait: float,
        max_attempts: int,
        bounds: Bounds,
        retry_base: float = 0.2,
        retry_max: float = 5.0,
    ) -> None:
        self.registry = registry
        self.bounds = bounds
        self.catalog = catalog
        self.gate = gate
        self.max_limit_wait = max_limit_wait
        self.max_attempts = max_attempts
        self.retry_base = retry_base
        self.retry_max = retry_max
        self.connect_timeout = connect_timeout
        self.default_timeout = default_timeout
        # Set when a claim may have to reach replicas or the disk before a write is sent (ops/replication.py)
        self.write_wait: Callable[[str], Awaitable[None]] | None = None  # given the batch id
        self._sessions: dict[str, BackendSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._refresh_seconds = catalog.refresh_seconds

    async def session(self, server: str) -> BackendSession:
        """The live session for `server`, opening one if there is none (one opener at a time)."""
        session = self._sessions.get(server)
        if session is not None and self._usable(session) and self._fresh(session):
            return session
        async with self._locks.setdefault(server, asyncio.Lock()):
            session = self._sessions.get(server)
            if session is not None and session.suspect and session.alive:
                # A call timed out: keep the session only if the backend still answers a ping.
                session.suspect = not await session.ping(min(_PING_SECONDS, session.call_timeout))
                if session.suspect:
                    logger.warning("backend %s does not answer a ping after a timeout; reopening", server)
            if session is not None and self._usable(session):
                if not self._fresh(session):
                    await self._refresh_tools(session)
                return session
            if session is not None:
                await session.close()
            backend = self.registry.get(server)
            if backend is None:
                raise KeyError(server)
            session = BackendSession(
                server, backend, self.connect_timeout, backend.timeout_seconds or self.default_timeout
            )
            await session.open()
            self._sessions[server] = session
            await self.catalog.put(server, list(session.tools.values()))
            return session

    def ready(self, server: str) -> bool:
        """Whether `server` has a session open and fresh now (a call would not wait for one to open)."""
        session = self._sessions.get(server)
        return session is not None and self._usable(session) and self._fresh(session)

    async def warm(self) -> None:
        """Open a session to every configured backend, all at once; one that fails is logged and opened again by
        its first call."""

        async def one(server: str) -> None:
            try:
                await self.session(server)
            except Exception as exc:
                said = str(exc) if isinstance(exc, BackendError) else type(exc).__name__
                logger.warning("could not open a session to %s ahead of its first call: %s", server, said)

        await asyncio.gather(*(one(server) for server in self.registry.names))

    @staticmethod
    def _usable(session: BackendSession) -> bool:
        return session.alive and not session.suspect

    def _fresh(self, session: BackendSession) -> bool:
        return time.monotonic() - session.listed_at <= self._refresh_seconds

    async def _refresh_tools(self, session: BackendSession) -> None:
        # On the live session: closing it would cut the calls other lanes have in flight on it.
        client = session.client
        if client is None:
            return
        try:
            async with asyncio.timeout(self.connect_timeout):
                session.tools = {t.name: t for t in await list_tools(client)}
        except Exception as exc:  # keep the old list; the next caller tries again
            logger.warning("could not refresh the tools of %s: %s", session.name, type(exc).__name__)
            return
        session.listed_at = time.monotonic()
        await self.catalog.put(session.name, list(session.tools.values()))

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
