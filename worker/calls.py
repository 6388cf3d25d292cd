"""One item's MCP call -> its result record: the per-call checks, the backend's limits, retries, the record.

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

from mcp.shared.dispatcher import ProgressFnT
from mcp_types import SERVER_INFO_META_KEY, CallToolResult

from mcp_batch import records
from mcp_batch.backends.servers_file import connect_route
from mcp_batch.contract.checks import check_call, check_tool
from mcp_batch.errors import BackendError, BackendThrottled, BackendTimeout, BackendUnauthenticated, ReplicaWaitFailed
from mcp_batch.models import ItemStatus, Priority
from mcp_batch.records import ErrorInfo, ItemRecord, error_info
from mcp_batch.store.claims import Claim
from worker import metrics
from worker.admission import LimitWait
from worker.backend_session import BackendSession
from worker.questions import hold_seconds
from worker.sessions import SessionPool

logger = logging.getLogger(__name__)
_JITTER = random.Random()  # its own state: jitter never moves the random module's global one

_LEASE_MARGIN = 30.0  # a concurrency lease outlives its call's timeout by this much, then lapses
_DEFAULT_PAUSE = 1.0  # how long a 429 without Retry-After holds a backend back


def backoff(attempts: int, base: float, cap: float) -> float:
    """The pause after `attempts` failed sends: full jitter, uniform up to an exponential step, so the calls a broken
    backend failed together do not all come back together."""
    return _JITTER.uniform(0, min(cap, base * 2 ** (attempts - 1)))


def _failure(exc: BackendError, attempts: int) -> ErrorInfo:
    """The error of a failed call; a transient failure says how many sends it took."""
    if isinstance(exc, BackendThrottled):
        return error_info(exc.code, str(exc), "rate_limit", retry_after=exc.retry_after, attempts=attempts)
    if exc.transient:
        return error_info(exc.code, str(exc), "backend", attempts=attempts)
    return error_info(exc.code, str(exc), "backend")


def _unauthenticated(exc: BackendUnauthenticated) -> ErrorInfo:
    """The error of a call not sent for want of a credential (`connect`: the route that gives the tenant's)."""
    if exc.connect is None:
        return error_info(exc.code, str(exc), "backend")
    return error_info(exc.code, str(exc), "backend", connect=exc.connect)


async def _open(pool: SessionPool, server: str, tenant: str | None, asked: bool = False) -> BackendSession | ErrorInfo:
    """The live session for `server` (the tenant's own, for a backend that takes its credential), or the error
    saying why none could be opened. A batch that asks may have its tenant connect an OAuth backend first, once."""
    try:
        return await pool.session(server, tenant)
    except BackendUnauthenticated as exc:  # the credentials, not the backend's health: say so
        if exc.connect is not None:
            wait = pool.connect_wait
            if (
                not asked
                and wait is not None
                and tenant is not None
                and await wait.connected(server, tenant, exc.connect)
            ):
                return await _open(pool, server, tenant, asked=True)
            return _unauthenticated(exc)
        return error_info(exc.code, f"could not open a session to {server!r}: {exc}", "backend")
    except BackendError as exc:  # the root cause, in words (backends/failures.py)
        return error_info("backend_unavailable", f"could not open a session to {server!r}: {exc}", "backend")
    except Exception as exc:
        msg = f"could not open a session to {server!r}: {type(exc).__name__}"
        return error_info("backend_unavailable", msg, "backend")


class _Call:
    """One item's call as it goes: when it started, the sends and waits so far, and its record once it ends."""

    def __init__(self, claim: Claim, build: records.Builder, tenant: str | None = None) -> None:
        self.claim, self._build, self.tenant = claim, build, tenant
        self.started, self.clock = time.time(), time.monotonic()
        self.attempts: int | None = None  # None until the gate is reached: nothing was sent
        self.waited: float | None = None
        self.connecting: float | None = None  # set when the item waited for its backend's session to open

    def done(self, status: ItemStatus, error: ErrorInfo | None = None, **result: Any) -> ItemRecord:
        return self._build(
            status,
            started=self.started,
            error=error,
            elapsed_seconds=round(time.monotonic() - self.clock, 6),
            attempts=self.attempts,
            rate_wait_seconds=self.waited,
            connect_seconds=self.connecting,
            recovered=self.claim.recovered,
            **result,
        )


async def run_call(
    pool: SessionPool,
    claim: Claim,
    build: records.Builder,
    read_only: bool = True,
    dispatched: Callable[[bool], None] | None = None,
    share: tuple[str, float] | None = None,
    batch_id: str = "",
    priority: tuple[str, Priority] | None = None,
    progress: ProgressFnT | None = None,
    tenant: str | None = None,
) -> ItemRecord:
    """Run one item and return its result record (`build`: the item's record builder); never raises for a failure
    of the call itself.

    `dispatched` is called just before the request is sent (from then on the call may have reached its backend),
    told whether the call may write (a tool neither read-only nor idempotent);
    `share` (tenant, fraction) holds the call to its tenant's share of the backend's rate limit; `priority` (tenant,
    priority) to its turn among that tenant's calls; `progress` is handed each progress notification of the call;
    `tenant` is whose credential the call carries on a backend that takes the tenant's own (and whose per-tenant
    rate it counts against).
    A recovered claim (its first worker stopped mid-call) runs again only for a read-only or idempotent tool."""
    call = _Call(claim, build, tenant)
    session = await _ready(pool, call, read_only)
    if not isinstance(session, BackendSession):
        return session
    annotations = session.tools[claim.tool].annotations or {}
    repeatable = bool(annotations.get("readOnlyHint") or annotations.get("idempotentHint"))
    repeatable = repeatable or claim.tool in session.backend.read_only_tools
    if claim.recovered and not repeatable:
        return call.done(ItemStatus.interrupted, _interrupted(claim))
    call.attempts, call.waited = 0, 0.0
    if pool.write_wait is not None and not repeatable:
        try:  # the claim on replicas and disk first: neither a failover nor a host crash can make this write run twice
            await pool.write_wait(batch_id)
        except ReplicaWaitFailed as exc:
            details = {"replicas_confirmed": exc.acked, "replicas_wanted": exc.wanted, "wait_seconds": exc.timeout}
            return call.done(ItemStatus.error, error_info("replica_wait_failed", str(exc), "storage", **details))
    result = await _send(pool, call, session, repeatable, dispatched, share, priority, progress)
    return _answered(call, result) if isinstance(result, CallToolResult) else result


def _interrupted(claim: Claim) -> ErrorInfo:
    """Why a recovered call that may write is not sent again."""
    why = "and it is not run again because the tool is not annotated readOnlyHint or idempotentHint"
    if claim.record_lost:
        msg = (
            f"the call to {claim.tool!r} was sent and answered, but a Redis failover lost its result before it "
            f"reached a replica, {why}"
        )
        return error_info("interrupted", msg, "batch", record_lost=True)
    msg = f"the worker running {claim.tool!r} stopped while the call was in flight; it may or may not have run, {why}"
    return error_info("interrupted", msg, "batch")


async def _ready(pool: SessionPool, call: _Call, read_only: bool) -> BackendSession | ItemRecord:
    """The session to send the call on, or the record of why it is not sent: a per-call check, no session, a tool
    the backend does not list or policy refuses."""
    claim = call.claim
    refusal = check_call(claim.server, claim.tool, claim.arguments, pool.registry.get(claim.server), pool.bounds)
    if refusal is not None:
        return call.done(refusal.status, refusal.error())
    opening = None if pool.ready(claim.server, call.tenant) else time.monotonic()
    session = await _open(pool, claim.server, call.tenant)
    if opening is not None:
        call.connecting = round(time.monotonic() - opening, 6)
    if not isinstance(session, BackendSession):
        return call.done(_status(session), session)
    refusal = check_tool(claim.server, claim.tool, claim.arguments, session.backend, session.tools, read_only)
    return call.done(refusal.status, refusal.error()) if refusal is not None else session


async def _send(
    pool: SessionPool,
    call: _Call,
    session: BackendSession,
    repeatable: bool,
    dispatched: Callable[[bool], None] | None,
    share: tuple[str, float] | None,
    priority: tuple[str, Priority] | None = None,
    progress: ProgressFnT | None = None,
) -> CallToolResult | ItemRecord:
    """The backend's answer, once admitted under its limits (a transient failure of a repeatable call sent again
    after a backoff), or the record of the failure that ended it."""
    claim, attempts, refused = call.claim, 0, False
    timeout = claim.timeout_seconds or session.call_timeout
    lease_seconds = timeout + _LEASE_MARGIN + hold_seconds()  # a call held open for an answer keeps its lease
    while True:
        try:
            async with pool.gate.admit(
                claim.server, session.backend, pool.max_limit_wait, lease_seconds, share, priority, call.tenant
            ) as gate:
                call.waited = round((call.waited or 0.0) + gate.waited, 6)
                attempts = call.attempts = attempts + 1  # counted when sent: a call the gate turns away never was
                call.clock = time.monotonic()  # elapsed_seconds is the backend call alone
                if dispatched is not None:
                    dispatched(not repeatable)
                return await session.call(claim.tool, claim.arguments, timeout, progress)
        except LimitWait as exc:
            details = {"wait_seconds": round(exc.wait, 3), "max_wait_seconds": pool.max_limit_wait}
            return call.done(ItemStatus.error, error_info("rate_limited", str(exc), "rate_limit", **details))
        except BackendTimeout as exc:  # never repeated: a slow backend given the call again gets twice the load
            return call.done(ItemStatus.timeout, error_info(exc.code, str(exc), "timeout", timeout_seconds=timeout))
        except BackendUnauthenticated as exc:  # refused before it ran: sent once more with a new credential, if any
            if refused:
                return call.done(ItemStatus.unauthenticated, _unauthenticated(_with_route(exc, session)))
            refused = True
            try:
                await pool.refused(session)
            except BackendUnauthenticated as final:
                return call.done(ItemStatus.unauthenticated, _unauthenticated(_with_route(final, session)))
            reopened = await _open(pool, claim.server, call.tenant)
            if not isinstance(reopened, BackendSession):
                return call.done(_status(reopened), reopened)
            session = reopened
        except BackendError as exc:
            if isinstance(exc, BackendThrottled):  # every worker holds back; the gate keeps this call out until then
                await pool.gate.refused(claim.server, exc.retry_after or _DEFAULT_PAUSE)
            if not (exc.transient and repeatable and attempts < pool.max_attempts):
                return call.done(ItemStatus.error, _failure(exc, attempts))
            metrics.retried(claim.server, exc)
            await asyncio.sleep(backoff(attempts, pool.retry_base, pool.retry_max))
            reopened = await _open(pool, claim.server, call.tenant)  # a broken session was closed: a fresh one
            if not isinstance(reopened, BackendSession):
                details = {**(reopened["details"] or {}), "attempts": attempts}
                return call.done(_status(reopened), {**reopened, "details": details})
            session = reopened


def _status(error: ErrorInfo) -> ItemStatus:
    """The status of an item whose session could not be had: `unauthenticated` when a credential is what is missing."""
    return ItemStatus.unauthenticated if error["code"] == BackendUnauthenticated.code else ItemStatus.error


def _with_route(exc: BackendUnauthenticated, session: BackendSession) -> BackendUnauthenticated:
    """`exc`, naming the route that gives the tenant's credential when the session carried one."""
    if exc.connect is not None or session.tenant is None:
        return exc
    route = connect_route(session.name, session.backend)
    return BackendUnauthenticated(
        f"{session.name!r} refused the tenant's credential (set it again with {route})", route
    )


def _answered(call: _Call, result: CallToolResult) -> ItemRecord:
    """The record of the backend's answer: its content and structured content, its own metadata, and for an
    `isError` answer the tool's own words (any argument it repeats masked)."""
    content = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
    fields = {"content": content, "structured_content": result.structured_content, "is_error": result.is_error}
    # The tool's runtime metadata; the protocol's stamp of the server's identity is the item's `server` already.
    meta = {key: value for key, value in (result.meta or {}).items() if key != SERVER_INFO_META_KEY}
    if meta:
        fields["meta"] = meta
    if result.is_error:
        tool = call.claim.tool
        msg = records.tool_message(content, call.claim.arguments) or f"tool {tool!r} reported an error without text"
        return call.done(ItemStatus.error, error_info("tool_error", msg, "tool"), **fields)
    return call.done(ItemStatus.ok, **fields)
