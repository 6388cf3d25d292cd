"""A worker's MCP client sessions: one per backend, shared by every tenant's calls when the backend's credential is
the operator's (static headers or env, or the service's client-credentials token); one per (backend, tenant) when
it is the tenant's own (`tenant` and `oauth` auth: worker/tenant_sessions.py). Opened lazily, reopened after a
break; a session is worker/backend_session.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mcp_batch.backends.catalog import Catalog, credential_tag
from mcp_batch.backends.connect import list_tools
from mcp_batch.backends.presented import Presented
from mcp_batch.backends.servers_file import Backend, HttpBackend, Registry, per_tenant
from mcp_batch.contract.checks import Bounds
from mcp_batch.errors import BackendError, BackendUnauthenticated
from worker.admission import Gate
from worker.backend_session import BackendSession
from worker.connect_wait import ConnectWait
from worker.credentials import RECHECK_SECONDS, TenantCredentials
from worker.tenant_sessions import TenantSessions

logger = logging.getLogger(__name__)

_PING_SECONDS = 5.0  # after a timeout, how long a backend has to prove it is still alive


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
        credentials: TenantCredentials | None = None,
        tenant_sessions: TenantSessions | None = None,
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
        self.connect_wait: ConnectWait | None = (
            None  # asks a tenant to connect an OAuth backend (worker/connect_wait.py)
        )
        self._sessions: dict[str, BackendSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._refresh_seconds = catalog.refresh_seconds
        self.credentials = credentials  # None: no backend takes a tenant's or a machine credential
        self.tenants = TenantSessions(64, 300.0) if tenant_sessions is None else tenant_sessions

    async def session(self, server: str, tenant: str | None = None) -> BackendSession:
        """The live session for `server` (one opener at a time); for a backend that takes the tenant's own credential,
        `tenant`'s session, opened with its credential (BackendUnauthenticated naming the route that gives one, when
        the tenant has none: the call is never sent without)."""
        backend = self.registry.get(server)
        if backend is not None and per_tenant(backend):
            return await self._tenant_session(server, backend, tenant)
        session = self._sessions.get(server)
        if session is not None and self._usable(session) and self._fresh(session) and not self._machine_due(session):
            return session
        async with self._locks.setdefault(server, asyncio.Lock()):
            session = self._sessions.get(server)
            if session is not None and session.suspect and session.alive:
                # A call timed out: keep the session only if the backend still answers a ping.
                session.suspect = not await session.ping(min(_PING_SECONDS, session.call_timeout))
                if session.suspect:
                    logger.warning("backend %s does not answer a ping after a timeout; reopening", server)
            if session is not None and self._usable(session):
                if self._machine_due(session):
                    await self._machine_token(session, renew=False)
                if not self._fresh(session):
                    await self._refresh_tools(session)
                return session
            if session is not None:
                await session.close()
            if backend is None:
                raise KeyError(server)
            presented = None
            if backend.auth is not None and backend.auth.type == "oauth_client_credentials":
                presented = Presented(await self._credentials.machine.token(server, backend))
            session = self._new(server, backend, None, presented)
            await session.open()
            self._sessions[server] = session
            await self.catalog.put(server, list(session.tools.values()))
            return session

    async def _tenant_session(self, server: str, backend: Backend, tenant: str | None) -> BackendSession:
        if tenant is None:
            raise BackendUnauthenticated(f"{server!r} takes each tenant's own credential: no tenant was given")
        key = (server, tenant)
        session = self.tenants.get(key)
        if session is not None and self._usable(session) and self._fresh(session):
            presented = session.presented
            assert presented is not None
            if not self._credentials.due(presented) or not await self._credentials.stale(tenant, presented, server):
                return session
        async with self.tenants.lock(key):
            session = self.tenants.get(key)
            if session is not None and session.suspect and session.alive:
                session.suspect = not await session.ping(min(_PING_SECONDS, session.call_timeout))
            try:
                presented = await self._credentials.current(tenant, server, backend)
            except BackendUnauthenticated:
                self._forget(key)  # deleted or no longer usable: its session must not be used again
                raise
            if session is not None and self._usable(session) and self._present(session, presented):
                if not self._fresh(session):
                    await self._refresh_tools(session)
                return session
            self._forget(key)
            session = self._new(server, backend, tenant, presented)
            try:
                await session.open()
            except BackendUnauthenticated:  # refused at the handshake: a refreshed token, once
                session = self._new(
                    server, backend, tenant, await self._credentials.refused(tenant, server, backend, presented)
                )
                await session.open()
            self.tenants.add(key, session)
            await self._list_out(session)
            return session

    async def refused(self, session: BackendSession) -> None:
        """The backend refused `session`'s credential during a call: put a new one in place for one more try (a
        secret the tenant set meanwhile, a refreshed token, a new machine token), or BackendUnauthenticated."""
        if session.tenant is not None and session.presented is not None:
            key = (session.name, session.tenant)
            async with self.tenants.lock(key):
                try:
                    fresh = await self._credentials.refused(
                        session.tenant, session.name, session.backend, session.presented
                    )
                except BackendUnauthenticated:
                    self._forget(key)
                    raise
                if not self._present(session, fresh):
                    self._forget(key)  # a stdio process has its credential for life: the next call opens a new one
            return
        if session.backend.auth is not None and session.backend.auth.type == "oauth_client_credentials":
            await self._machine_token(session, renew=True)
            return
        raise BackendUnauthenticated(f"{session.name!r} refused the service's credentials")

    def _present(self, session: BackendSession, presented: Presented) -> bool:
        """Make `session` present `presented`; False when it cannot without reopening (a stdio process's env)."""
        current = session.presented
        assert current is not None
        if presented.read == current.read and presented.value == current.value:
            current.expires_at, current.checked = presented.expires_at, presented.checked
            current.refresh_at = presented.refresh_at
            return True
        if not isinstance(session.backend, HttpBackend):
            return False
        current.update(presented.value, presented.read, presented.expires_at, presented.refresh_at)
        return True

    def _forget(self, key: tuple[str, str]) -> None:
        session = self.tenants.remove(key)
        if session is not None:
            self.tenants.add_closing(session)

    def _new(self, server: str, backend: Backend, tenant: str | None, presented: Presented | None) -> BackendSession:
        pool = self.tenants.pool if tenant is not None and isinstance(backend, HttpBackend) else None
        timeout = backend.timeout_seconds or self.default_timeout
        return BackendSession(server, backend, self.connect_timeout, timeout, tenant, presented, pool)

    @property
    def _credentials(self) -> TenantCredentials:
        if self.credentials is None:
            raise BackendUnauthenticated("this worker holds no credentials store (no secrets key is configured)")
        return self.credentials

    @staticmethod
    def _machine_due(session: BackendSession) -> bool:
        presented = session.presented
        return presented is not None and time.monotonic() - presented.checked >= RECHECK_SECONDS

    async def _machine_token(self, session: BackendSession, renew: bool) -> None:
        """Ask for the machine token again (the source caches it); `renew`: the backend refused the one it had."""
        presented = session.presented
        assert presented is not None
        if renew:
            await self._credentials.machine.invalidate(session.name)
        token = await self._credentials.machine.token(session.name, session.backend)
        presented.update(token, presented.read, presented.expires_at)

    def ready(self, server: str, tenant: str | None = None) -> bool:
        """Whether `server` has a session open and fresh now (a call would not wait for one to open)."""
        backend = self.registry.get(server)
        if backend is not None and per_tenant(backend):
            session = None if tenant is None else self.tenants.get((server, tenant))
        else:
            session = self._sessions.get(server)
        return session is not None and self._usable(session) and self._fresh(session)

    async def warm(self) -> None:
        """Open a session to every configured backend, all at once; one that fails is logged and opened again by
        its first call."""

        async def one(server: str) -> None:
            backend = self.registry.get(server)
            if backend is not None and per_tenant(backend):
                return  # a tenant's session opens with its tenant's first call
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
        await self._list_out(session)

    async def _list_out(self, session: BackendSession) -> None:
        """Cache the session's tools for the API: a tenant's session's as that tenant's alone."""
        tools = list(session.tools.values())
        if session.tenant is None or session.presented is None:
            await self.catalog.put(session.name, tools)
        else:
            tag = credential_tag(session.presented.read)
            await self.catalog.tenant_put(session.name, session.tenant, tag, tools)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), self.tenants.close(), return_exceptions=True)
