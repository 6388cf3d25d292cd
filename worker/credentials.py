"""The credentials a worker's sessions present: each tenant's own for `tenant` and `oauth` backends, the service's
machine token for `oauth_client_credentials` ones.

A tenant's credential is read (and opened) when its session opens, then compared with the stored one at most every
`RECHECK_SECONDS` by its sealed bytes alone, so a call costs no Redis read and no decryption; a credential the tenant
replaced or deleted applies within that time. An OAuth token expiring within `EXPIRY_MARGIN_SECONDS` is refreshed
(the Refresher: one at a time across workers) before it is sent.
"""

from __future__ import annotations

import logging
import time

from mcp_batch.backends.presented import Presented
from mcp_batch.backends.servers_file import Backend, connect_route
from mcp_batch.credentials.hooks import MachineTokens, NoMachineTokens, NoRefresh, Refresher
from mcp_batch.credentials.record import Credential, CredentialKind, refresh_at, refresh_due
from mcp_batch.errors import BackendUnauthenticated, SealBroken
from mcp_batch.store.credentials import Credentials

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 2.0  # how stale a session's view of its stored credential may be
EXPIRY_MARGIN_SECONDS = 60.0  # a token this close to its expiry (at most a third of its life) is refreshed first


class TenantCredentials:
    """Reads, checks and refreshes the credentials sessions present."""

    def __init__(
        self,
        store: Credentials,
        refresher: Refresher | None = None,
        machine: MachineTokens | None = None,
        margin: float = EXPIRY_MARGIN_SECONDS,
    ) -> None:
        self.store = store
        self.margin = margin
        self.refresher: Refresher = refresher or NoRefresh()
        self.machine: MachineTokens = machine or NoMachineTokens()

    async def current(self, tenant: str, server: str, backend: Backend) -> Presented:
        """What a session of `tenant` on `server` presents now; BackendUnauthenticated (naming the route that
        fixes it) when the tenant has no usable credential. Never sent without one."""
        read = await self.store.get_sealed(tenant, server)
        if read is None:
            raise self._missing(server, backend, "the tenant has not set a credential for it")
        credential = self._open(tenant, server, backend, read)
        if (
            credential.kind is CredentialKind.oauth
            and refresh_due(credential, self.margin)
            and not credential.needs_connect
        ):
            fresh = await self.refresher.refresh(tenant, server, backend, read, credential)
            if fresh is None:
                raise self._missing(server, backend, "its token expired and could not be refreshed")
            read = await self.store.get_sealed(tenant, server) or b""
            credential = fresh
        value = credential.value()
        if value is None:
            raise self._missing(server, backend, "the tenant's grant no longer works")
        return Presented(value, read, credential.expires_at, refresh_at=refresh_at(credential, self.margin))

    @staticmethod
    def due(presented: Presented) -> bool:
        """Whether `presented` is to be compared with the stored credential now (no I/O: the per-call check)."""
        if presented.refresh_at is not None and presented.refresh_at <= time.time():
            return True
        return time.monotonic() - presented.checked >= RECHECK_SECONDS

    async def stale(self, tenant: str, presented: Presented, server: str) -> bool:
        """Whether the stored credential is no longer the one presented, or its token is about to expire (read at
        most every RECHECK_SECONDS: between checks, False)."""
        now = time.monotonic()
        expiring = presented.refresh_at is not None and presented.refresh_at <= time.time()
        if not expiring and now - presented.checked < RECHECK_SECONDS:
            return False
        presented.checked = now
        return expiring or await self.store.get_sealed(tenant, server) != presented.read

    async def refused(self, tenant: str, server: str, backend: Backend, presented: Presented) -> Presented:
        """After the backend refused `presented`: the credential to try once more (one the tenant set meanwhile, or
        a refreshed token), or BackendUnauthenticated."""
        read = await self.store.get_sealed(tenant, server)
        if read is not None and read != presented.read:
            return await self.current(tenant, server, backend)
        if read is not None:
            credential = self._open(tenant, server, backend, read)
            if credential.kind is CredentialKind.oauth and not credential.needs_connect:
                fresh = await self.refresher.refresh(tenant, server, backend, read, credential)
                value = None if fresh is None else fresh.value()
                if fresh is not None and value is not None:
                    stored = await self.store.get_sealed(tenant, server) or b""
                    return Presented(value, stored, fresh.expires_at, refresh_at=refresh_at(fresh, self.margin))
        raise self._missing(server, backend, "it refused the tenant's credential")

    def _open(self, tenant: str, server: str, backend: Backend, read: bytes) -> Credential:
        try:
            return self.store.open(tenant, server, read)
        except SealBroken:
            logger.warning(
                "a stored credential for %s opens under no secrets key; the tenant must set it again", server
            )
            raise self._missing(
                server, backend, "its stored credential opens under none of the service's keys"
            ) from None

    @staticmethod
    def _missing(server: str, backend: Backend, why: str) -> BackendUnauthenticated:
        route = connect_route(server, backend)
        return BackendUnauthenticated(f"no usable credential for {server!r}: {why} (set it with {route})", route)
