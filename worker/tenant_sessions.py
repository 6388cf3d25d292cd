"""A worker's sessions that carry one tenant's credential, by (server, tenant): never shared between tenants.

Bounded: past `limit`, the least recently used idle session is closed (one with calls in flight is not cut: the
table may then pass its bound until one is free). A session unused for `idle_seconds` is closed by `close_idle`,
which the worker runs periodically, so a stdio process started for a tenant does not outlive its tenant's work.
HTTP sessions send through one connection pool (`pool`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict

from mcp_batch.backends.presented import SharedPool
from mcp_batch.store.channels import Listener
from worker.backend_session import BackendSession

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (server, tenant)


class TenantSessions:
    """The (server, tenant) sessions of one worker, least recently used first."""

    def __init__(self, limit: int, idle_seconds: float) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.pool = SharedPool()
        self._sessions: OrderedDict[Key, BackendSession] = OrderedDict()
        self._locks: dict[Key, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: Key) -> BackendSession | None:
        """The session of (server, tenant), marked as just used."""
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            session.used_at = time.monotonic()
        return session

    def lock(self, key: Key) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def add(self, key: Key, session: BackendSession) -> None:
        """Keep `session`, closing the least recently used idle ones past the bound."""
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        over = len(self._sessions) - self.limit
        for old_key, old in list(self._sessions.items()):
            if over <= 0:
                break
            if old_key != key and not old.busy:
                self._drop(old_key)
                over -= 1

    def remove(self, key: Key) -> BackendSession | None:
        lock = self._locks.get(key)
        if lock is not None and not lock.locked():  # a held lock stays: its waiters must open under the same one
            del self._locks[key]
        return self._sessions.pop(key, None)

    def close_idle(self) -> int:
        """Close the sessions unused for `idle_seconds` and not busy; how many."""
        cutoff = time.monotonic() - self.idle_seconds
        idle = [key for key, s in self._sessions.items() if s.used_at < cutoff and not s.busy]
        for key in idle:
            self._drop(key)
        return len(idle)

    def _drop(self, key: Key) -> None:
        session = self.remove(key)
        if session is not None:
            self.add_closing(session)

    def add_closing(self, session: BackendSession) -> None:
        """Close `session` aside: whoever opened a session or swept does not wait for a process to end."""
        task = asyncio.create_task(session.close(), name=f"close-session:{session.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        await asyncio.gather(*(s.close() for s in sessions), *self._closing, return_exceptions=True)
        await self.pool.close_pool()

    def recheck(self) -> None:
        """Have every session compare its credential with the stored one on its next call (one changed)."""
        for session in self._sessions.values():
            if session.presented is not None:
                session.presented.checked = -math.inf

    async def run_rechecks(self, changes: Listener) -> None:
        """For the worker's life: a tenant's credential changed (`changes`, the credentials channel), so sessions
        check theirs before their next call rather than within RECHECK_SECONDS. A reconnect wakes it too."""
        with changes.watch() as changed:
            while True:
                await changed.wait()
                changed.clear()
                self.recheck()

    async def run_idle_closer(self) -> None:
        """Close idle sessions every quarter of `idle_seconds` (at least each second), for the worker's life."""
        while True:
            await asyncio.sleep(max(1.0, self.idle_seconds / 4))  # a periodic duty
            closed = self.close_idle()
            if closed:
                logger.info("closed %d idle tenant session(s)", closed)
