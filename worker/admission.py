"""The gate a call passes before it reaches its backend: a concurrency lease, then a rate slot.

The lease comes first so that a call holding a rate slot is never left waiting for a lease: calls reach the backend
when their slot says, which is what keeps bursts within the limit at the backend itself. Within a process one lane
per backend contends for leases at a time (FIFO), the others queue behind it locally; a released lease, published
by whichever worker released it, wakes the contender at once.

Every limiter call waits out a Redis outage (up to `outage_seconds`) instead of failing the call it admits: a call
waiting for its slot keeps waiting, and a finished call's lease is still released once Redis is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from mcp_batch.backends.limits import Reservation, share_of
from mcp_batch.backends.servers_file import Backend, RateLimit
from mcp_batch.models import Priority
from mcp_batch.store.channels import Listener
from mcp_batch.store.outage import REDIS_DOWN, with_redis_retry
from worker import metrics
from worker.priority import PriorityTurns

logger = logging.getLogger(__name__)

_FALLBACK_POLL = 1.0  # seconds: a lost release message costs at most this much


class RateLimiting(Protocol):
    async def reserve(
        self, server: str, limit: RateLimit | None, max_wait: float, tenant: str | None = None
    ) -> Reservation: ...

    async def push_back(self, server: str, pause: float) -> None: ...


class Leasing(Protocol):
    def new_lease(self) -> str: ...

    async def try_acquire(self, server: str, limit: int, lease: str, lease_seconds: float) -> float | None: ...

    async def release(self, server: str, lease: str) -> None: ...


Turn = Callable[[], Awaitable[float | None]]  # a call's turn (worker/priority.py): how near a slot it may book


class LimitWait(Exception):
    """The backend's limits would make this call wait longer than it may."""

    def __init__(self, what: str, wait: float) -> None:
        super().__init__(f"{what} would take {wait:.1f}s, longer than the call may wait")
        self.what = what
        self.wait = wait


@dataclass(frozen=True)
class Admission:
    """How long a call waited at the gate."""

    waited: float = 0.0


def _own(tenant: str) -> str:
    """The bucket of a tenant's own rate on a backend (`rate_limit_per_tenant`), apart from its share of the
    backend's (`rate_share`): tenant names have no newline, so no tenant's share bucket is named so."""
    return f"{tenant}\nown"


class _Free:
    """The gate of a call that no limit holds back: nothing to book or release, only the call's metrics."""

    __slots__ = ("_in_flight", "_server")

    def __init__(self, server: str) -> None:
        self._server = server

    async def __aenter__(self) -> Admission:
        self._in_flight = metrics.admitted(self._server, 0.0)
        return _AT_ONCE

    async def __aexit__(self, *exc_info: object) -> None:
        self._in_flight.end()


_AT_ONCE = Admission(0.0)


class Gate:
    """Admits calls to backends under their limits, shared with every other worker through Redis."""

    def __init__(self, rate: RateLimiting, leases: Leasing, released: Listener, outage_seconds: float = 300.0) -> None:
        self.rate = rate
        self.leases = leases
        self.released = released
        self.outage_seconds = outage_seconds
        self._contenders: dict[str, asyncio.Lock] = {}
        self._paused_until: dict[str, float] = {}  # backends without a rate limit that answered 429 here
        self.turns: PriorityTurns | None = None  # priority within a tenant's share (None: not applied)
        self._near: dict[tuple[str, str | None], asyncio.Lock] = {}  # lanes that may book only a near slot

    def admit(
        self,
        server: str,
        backend: Backend,
        max_wait: float,
        lease_seconds: float,
        share: tuple[str, float] | None = None,
        priority: tuple[str, Priority] | None = None,
        tenant: str | None = None,
    ) -> AbstractAsyncContextManager[Admission]:
        """Hold a lease and a rate slot for one call; LimitWait if either is further away than `max_wait`.

        `share` (tenant, fraction): the call also takes a slot of that tenant's share of the backend's rate;
        `priority` (tenant, priority): before all that, a call below `high` waits for its turn (worker/priority.py);
        `tenant`: the call also takes a slot of that tenant's own rate on the backend (`rate_limit_per_tenant`).
        A backend with no limit, and no 429 to wait out, has nothing to book: its calls pass at once."""
        limited = backend.max_concurrency or backend.rate_limit or backend.rate_limit_per_tenant
        if not limited and self._paused_until.get(server, 0.0) <= time.monotonic():
            return _Free(server)
        return self._admit(server, backend, max_wait, lease_seconds, share, priority, tenant)

    @asynccontextmanager
    async def _admit(
        self,
        server: str,
        backend: Backend,
        max_wait: float,
        lease_seconds: float,
        share: tuple[str, float] | None,
        priority: tuple[str, Priority] | None,
        tenant: str | None = None,
    ) -> AsyncIterator[Admission]:
        start = time.monotonic()
        turn: Turn | None = None  # the call's turn among its tenant's priorities, and how near a slot it may book
        if priority is not None and backend.rate_limit and self.turns is not None:
            limit = backend.rate_limit if share is None else share_of(backend.rate_limit, share[1])
            turn = partial(self.turns.wait, server, priority[0], priority[1], limit)
        near = None if turn is None else await turn()
        lease = None
        if backend.max_concurrency:
            lease = await self._lease(server, backend.max_concurrency, lease_seconds, start + max_wait)
        try:
            wait = 0.0
            if backend.rate_limit and share is not None:
                tenant, fraction = share
                part = share_of(backend.rate_limit, fraction)
                mine = await self._reserve(server, part, start, max_wait, tenant, near, turn)
                if not mine.granted:
                    raise LimitWait("a slot of the tenant's share of the rate limit", mine.wait)
                wait = mine.wait
            if backend.rate_limit_per_tenant and tenant is not None:
                own = await self._reserve(server, backend.rate_limit_per_tenant, start, max_wait, _own(tenant))
                if not own.granted:
                    raise LimitWait("a slot of the tenant's own rate limit on the backend", own.wait)
                wait = max(wait, own.wait)
            if backend.rate_limit or self._paused_until.get(server, 0) > time.monotonic():
                reservation = await self._reserve(server, backend.rate_limit, start, max_wait, None, near, turn)
                if not reservation.granted:
                    raise LimitWait("a rate-limit slot", reservation.wait)
                wait = max(wait, reservation.wait)
            if wait > 0:
                await asyncio.sleep(wait)
            in_flight = metrics.admitted(server, waited := time.monotonic() - start)
            try:
                yield Admission(waited)
            finally:
                in_flight.end()
        finally:
            if lease is not None:
                await self._release(server, lease)

    async def _reserve(
        self,
        server: str,
        limit: RateLimit | None,
        start: float,
        max_wait: float,
        tenant: str | None = None,
        near: float | None = None,
        turn: Turn | None = None,
    ) -> Reservation:
        """Book a rate slot; with `near`, only one at most that far away: a further one is asked for again once it
        is that near, after the call's `turn` again (so a `low` call never holds a slot a `high` one arriving
        meanwhile would need, and takes its minimum share once one does)."""

        def remaining() -> float:
            return max(0.0, max_wait - (time.monotonic() - start))  # time spent in an outage counts

        def reserve(near: float | None) -> Awaitable[Reservation]:
            return self.rate.reserve(server, limit, remaining() if near is None else min(near, remaining()), tenant)

        if near is None:
            return await with_redis_retry(partial(reserve, None), outage=self.outage_seconds)
        # One lane per backend in this process waits for a near slot, the others behind it: a lane sleeps until its
        # slot is near instead of every lane asking over and over.
        async with self._near.setdefault((server, tenant), asyncio.Lock()):
            while True:
                reservation = await with_redis_retry(partial(reserve, near), outage=self.outage_seconds)
                if reservation.granted or near is None or reservation.wait > remaining():
                    return reservation
                await asyncio.sleep(reservation.wait - near)
                near = None if turn is None else await turn()

    async def refused(self, server: str, pause: float) -> None:
        """The backend answered 429: hold every worker's calls to it back for `pause` seconds."""
        self._paused_until[server] = time.monotonic() + pause
        await with_redis_retry(lambda: self.rate.push_back(server, pause), outage=self.outage_seconds)

    async def _release(self, server: str, lease: str) -> None:
        try:
            await with_redis_retry(lambda: self.leases.release(server, lease), outage=self.outage_seconds)
        except REDIS_DOWN:  # the call itself is done and its result must not be lost for this
            logger.warning("could not release a lease on %s while Redis was down; it expires by itself", server)

    async def _lease(self, server: str, limit: int, lease_seconds: float, deadline: float) -> str:
        lease = self.leases.new_lease()
        async with self._contenders.setdefault(server, asyncio.Lock()):
            with self.released.watch(server) as released:
                while True:
                    released.clear()
                    expires_in = await with_redis_retry(
                        lambda: self.leases.try_acquire(server, limit, lease, lease_seconds), outage=self.outage_seconds
                    )
                    if expires_in is None:
                        return lease
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise LimitWait("a concurrency lease", expires_in)
                    with suppress(TimeoutError):
                        async with asyncio.timeout(min(expires_in + 0.01, _FALLBACK_POLL, remaining)):
                            await released.wait()
