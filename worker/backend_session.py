"""One live MCP client session to a backend, owned by its own task; for one tenant when it carries that tenant's
credential.

Each session is owned by its own task, which enters and leaves the SDK client's context (anyio requires both in
one task); items on any task call through it concurrently. A call that finds the session dead (the stdio process
exited, the HTTP server went away) fails and the next call opens a fresh session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from mcp import Client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.connect import HttpOutcome, connect, http_outcome, list_tools
from mcp_batch.backends.failures import describe
from mcp_batch.backends.presented import Presented, SharedPool
from mcp_batch.backends.servers_file import Backend
from mcp_batch.errors import BackendError, BackendThrottled, BackendTimeout, BackendUnauthenticated
from worker.backend_logs import BackendLogs
from worker.questions import Seats, current
from worker.tool_call import call_tool

logger = logging.getLogger(__name__)

_STOP_SECONDS = 10.0  # longest a cancelled session's owner gets to close its client (the SDK kills within ~4 s)


class BackendSession:
    """A live client session to one backend, with its tool list; `tenant` names whose credential it presents
    (`presented`), and then no other tenant's call is ever sent on it. `pool`: the HTTP connection pool it sends
    through (its own when None)."""

    def __init__(
        self,
        name: str,
        backend: Backend,
        connect_timeout: float,
        call_timeout: float,
        tenant: str | None = None,
        presented: Presented | None = None,
        pool: SharedPool | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self.tenant = tenant
        self.presented = presented
        self.pool = pool
        self.used_at = time.monotonic()  # when a call last asked for it (the idle close of tenants' sessions)
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
                self.backend,
                self.call_timeout,
                self.seats,
                self.logs.received,
                self.logs.level,
                self.presented,
                self.pool,
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
    def busy(self) -> bool:
        """Whether a call is in flight on it."""
        return self.seats.occupied

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
