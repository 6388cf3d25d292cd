"""One MCP call -> one item result record; one long-lived session per backend, reopened when it breaks.

Each session is owned by its own task, which enters and leaves the SDK client's context (anyio requires both in
one task); items on any task call through it concurrently. A call that finds the session dead (the stdio process
exited, the HTTP server went away) fails and the next call opens a fresh session.

A transient failure (the connection broke, HTTP 5xx, 429) of a read-only or idempotent tool is sent again, up to
`max_attempts` sends, after an exponential backoff with full jitter (and, for a 429, no sooner than its Retry-After).
A timeout, the tool's own error, a protocol error or another 4xx is final at once, as is any failure of a tool that
may change something.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.connect import HttpOutcome, connect, http_outcome, list_tools
from mcp_batch.backends.servers_file import Backend, Registry
from mcp_batch.contract.checks import Bounds, check_call, check_tool
from mcp_batch.contract.document import iso
from mcp_batch.errors import BackendError, BackendThrottled, BackendTimeout, BackendUnauthenticated
from mcp_batch.models import ItemStatus, ToolInfo
from mcp_batch.store.batches import Claim
from worker import worker_metrics as metrics
from worker.gate import Gate, LimitWait

logger = logging.getLogger(__name__)

_STOP_SECONDS = 10.0  # longest a cancelled session's owner gets to close its client (the SDK kills within ~4 s)
_PING_SECONDS = 5.0  # after a timeout, how long a backend has to prove it is still alive
_LEASE_MARGIN = 30.0  # a concurrency lease outlives its call's timeout by this much, then lapses
_DEFAULT_PAUSE = 1.0  # how long a 429 without Retry-After holds a backend back


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
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Start the owner task and wait until the session is initialized and its tools are listed."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp-session:{self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
        except BaseException:
            await self.close(wait=0.0)  # still starting: stop it now (a stdio process is reaped by its owner)
            raise

    async def _own(self, ready: asyncio.Future[None]) -> None:
        outcome = HttpOutcome()
        http_outcome.set(outcome)  # this task's own context: records a 401/403 answered to the handshake
        try:
            async with connect(self.backend, self.call_timeout) as client:
                self.tools = {t.name: t for t in await list_tools(client)}
                self.client = client
                self.listed_at = time.monotonic()
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # the owner must never die silently: hand the failure to open()
            if not ready.done():
                failure: BaseException = exc
                if outcome.status in (401, 403):
                    failure = BackendUnauthenticated(f"{self.name!r} refused the credentials (HTTP {outcome.status})")
                ready.set_exception(failure if isinstance(failure, Exception) else BackendError("session cancelled"))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.warning("session to %s ended: %s", self.name, type(exc).__name__)
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

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Call a tool; BackendTimeout past `timeout`, BackendError when the session broke."""
        client = self.client
        if client is None:  # another call broke it since this one was handed the session
            raise BackendError(f"session to {self.name!r} is closed", transient=True)
        outcome = HttpOutcome()
        token = http_outcome.set(outcome)
        try:
            async with asyncio.timeout(timeout):  # no extra task per call, unlike wait_for
                return await client.call_tool(tool, arguments)
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
            raise BackendError(f"connection to {self.name!r} failed: {type(exc).__name__}", transient=True) from None
        finally:
            http_outcome.reset(token)

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


def _error(code: str, message: str, type_: str, **details: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "type": type_, "details": details or None}


def backoff(attempts: int, base: float, cap: float) -> float:
    """The pause after `attempts` failed sends: full jitter, uniform up to an exponential step, so the calls a broken
    backend failed together do not all come back together."""
    return random.uniform(0, min(cap, base * 2 ** (attempts - 1)))


def _failure(exc: BackendError, attempts: int) -> dict[str, Any]:
    """The error record of a failed call; a transient failure says how many sends it took."""
    if isinstance(exc, BackendThrottled):
        return _error(exc.code, str(exc), "rate_limit", retry_after=exc.retry_after, attempts=attempts)
    if exc.transient:
        return _error(exc.code, str(exc), "backend", attempts=attempts)
    return _error(exc.code, str(exc), "backend")


async def _open(pool: SessionPool, server: str) -> BackendSession | dict[str, Any]:
    """The live session for `server`, or the error record saying why none could be opened."""
    try:
        return await pool.session(server)
    except BackendUnauthenticated as exc:  # the credentials, not the backend's health: say so
        return _error(exc.code, str(exc), "backend")
    except Exception as exc:
        msg = f"could not open a session to {server!r}: {type(exc).__name__}"
        return _error("backend_unavailable", msg, "backend")


async def run_call(
    pool: SessionPool,
    claim: Claim,
    worker: str,
    read_only: bool = True,
    dispatched: Callable[[], None] | None = None,
    share: tuple[str, float] | None = None,
) -> dict[str, Any]:
    """Run one item and return its result record; never raises for a failure of the call itself.

    `dispatched` is called just before the request is sent (from then on the call may have reached its backend);
    `share` (tenant, fraction) holds the call to its tenant's share of the backend's rate limit.
    A recovered claim (its first worker stopped mid-call) runs again only for a read-only or idempotent tool."""
    started = time.time()
    clock = time.monotonic()
    record: dict[str, Any] = {"started_at": iso(started), "worker": worker}

    def done(status: ItemStatus, **fields: Any) -> dict[str, Any]:
        record.update(fields, status=status.value, finished_at=iso(time.time()))
        record["elapsed_seconds"] = round(time.monotonic() - clock, 6)
        return record

    refusal = check_call(claim.server, claim.tool, claim.arguments, pool.registry.get(claim.server), pool.bounds)
    if refusal is not None:
        return done(refusal.status, error=refusal.error())
    session = await _open(pool, claim.server)
    if isinstance(session, dict):
        return done(ItemStatus.error, error=session)
    refusal = check_tool(claim.server, claim.tool, claim.arguments, session.backend, session.tools, read_only)
    if refusal is not None:
        return done(refusal.status, error=refusal.error())
    timeout = claim.timeout_seconds or session.call_timeout
    annotations = session.tools[claim.tool].annotations or {}
    retryable = bool(annotations.get("readOnlyHint") or annotations.get("idempotentHint"))
    if claim.recovered:
        record["recovered"] = True
        if not (retryable or claim.tool in session.backend.read_only_tools):
            msg = (
                f"the worker running {claim.tool!r} stopped while the call was in flight; it may or may not have "
                "run, and it is not run again because the tool is not annotated readOnlyHint or idempotentHint"
            )
            return done(ItemStatus.interrupted, error=_error("interrupted", msg, "batch"))
    record["attempts"], record["rate_wait_seconds"] = 0, 0.0
    while True:
        try:
            async with pool.gate.admit(
                claim.server, session.backend, pool.max_limit_wait, timeout + _LEASE_MARGIN, share
            ) as gate:
                record["rate_wait_seconds"] = round(record["rate_wait_seconds"] + gate.waited, 6)
                record["attempts"] += 1  # counted when sent: a call the gate turns away was never sent
                clock = time.monotonic()  # elapsed_seconds is the backend call alone
                if dispatched is not None:
                    dispatched()
                result = await session.call(claim.tool, claim.arguments, timeout)
        except LimitWait as exc:
            details = {"wait_seconds": round(exc.wait, 3), "max_wait_seconds": pool.max_limit_wait}
            return done(ItemStatus.error, error=_error("rate_limited", str(exc), "rate_limit", **details))
        except BackendTimeout as exc:  # never repeated: a slow backend given the call again gets twice the load
            return done(ItemStatus.timeout, error=_error(exc.code, str(exc), "timeout", timeout_seconds=timeout))
        except BackendError as exc:
            if isinstance(exc, BackendThrottled):  # every worker holds back; the gate keeps this call out until then
                await pool.gate.refused(claim.server, exc.retry_after or _DEFAULT_PAUSE)
            if not (exc.transient and retryable and record["attempts"] < pool.max_attempts):
                return done(ItemStatus.error, error=_failure(exc, record["attempts"]))
            metrics.retried(claim.server, exc)
            await asyncio.sleep(backoff(record["attempts"], pool.retry_base, pool.retry_max))
            reopened = await _open(pool, claim.server)  # a broken session was closed: this opens a fresh one
            if isinstance(reopened, dict):
                return done(ItemStatus.error, error={**reopened, "details": {"attempts": record["attempts"]}})
            session = reopened
            continue
        break
    content = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
    fields = {"content": content, "structured_content": result.structured_content, "is_error": result.is_error}
    if result.is_error:
        msg = f"tool {claim.tool!r} reported an error (see content)"
        return done(ItemStatus.error, error=_error("tool_error", msg, "tool"), **fields)
    return done(ItemStatus.ok, **fields)
