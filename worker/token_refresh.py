"""Refreshing a tenant's OAuth access token for the worker (the `Refresher` of credentials/hooks.py): one refresh
at a time across every worker, so a rotating refresh token is spent once.

A refresh takes the (tenant, server) lock in Redis and reads the stored credential again: when another worker has
refreshed it meanwhile (the stored value is no longer the one the caller read) and its token is fresh, that one is
used and nothing is spent. Otherwise the refresh token is spent and the result written only over the value read. A
refresh the authorization server refuses stores the credential `needs_connect`; its calls end `unauthenticated`.

The MCP SDK's OAuthClientProvider refreshes within one process (an in-memory lock) and answers a refused refresh by
starting an interactive authorization; a worker needs the fleet-wide lock and must never start one, so this uses the
SDK's token models and the spec's requests (grants.py) instead.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx2

from mcp_batch.backends.servers_file import Backend
from mcp_batch.credentials import grants
from mcp_batch.credentials.record import Credential, refresh_due
from mcp_batch.errors import BackendError, OAuthGrantRefused, OAuthUnavailable, SealBroken
from mcp_batch.store.credentials import Credentials
from mcp_batch.store.oauth import OAuthStates

log = logging.getLogger("mcp_batch.oauth")

LOCK_SECONDS = 30.0  # a refresh's lock lapses on its own if its worker dies holding it
_WAIT_INTERVAL = 0.05  # how often a worker waiting on another's refresh looks again
# Calls in flight with the old token are refused after a refresh has already stored (and the session taken) the new
# one: they come back with the new one as `read`, and it is not spent again within this time.
_JUST_REFRESHED_SECONDS = 5.0


class LockedRefresher:
    """Refreshes tenants' OAuth tokens under the fleet-wide lock."""

    def __init__(self, credentials: Credentials, states: OAuthStates, margin: float, timeout: float) -> None:
        self.credentials = credentials
        self.states = states
        self.margin = margin
        self.timeout = timeout

    async def refresh(
        self, tenant: str, server: str, backend: Backend, read: bytes, credential: Credential
    ) -> Credential | None:
        deadline = time.monotonic() + LOCK_SECONDS
        while True:
            holder = await self.states.lock(tenant, server, LOCK_SECONDS)
            if holder is not None:
                try:
                    return await self._refresh_held(tenant, server, read)
                finally:
                    await self.states.unlock(tenant, server, holder)
            while await self.states.locked(tenant, server):  # another worker refreshes: use what it leaves
                if time.monotonic() > deadline:
                    raise BackendError("the tenant's OAuth token is being refreshed by a stuck worker", transient=True)
                await asyncio.sleep(_WAIT_INTERVAL)
            stored = await self._stored(tenant, server)
            if stored is None or stored[1].needs_connect:
                return None
            if stored[0] != read and not refresh_due(stored[1], self.margin):
                return stored[1]

    async def _stored(self, tenant: str, server: str) -> tuple[bytes, Credential] | None:
        sealed = await self.credentials.get_sealed(tenant, server)
        if sealed is None:
            return None
        try:
            return sealed, self.credentials.open(tenant, server, sealed)
        except SealBroken:
            return None

    async def _refresh_held(self, tenant: str, server: str, read: bytes) -> Credential | None:
        stored = await self._stored(tenant, server)
        if stored is None or stored[1].needs_connect:
            return None
        sealed, current = stored
        if sealed != read and not refresh_due(current, self.margin):
            return current  # refreshed by another worker since the caller read it
        if _just_refreshed(current) and not refresh_due(current, self.margin):
            return current  # a call sent with the token this refresh replaced was refused after the session took it
        async with httpx2.AsyncClient(timeout=self.timeout) as http:
            try:
                renewed = await grants.refresh(http, server, current)
            except OAuthGrantRefused as exc:
                log.warning("oauth refresh refused: %s", exc, extra={"server": server, "tenant": tenant})
                renewed = current.model_copy(update={"needs_connect": True})
            except OAuthUnavailable as exc:
                if current.expires_at is not None and current.expires_at > time.time():
                    return current  # not expired yet: the next call tries the refresh again
                raise BackendError(f"{exc}; the call may be retried", transient=True) from None
        if not await self.credentials.replace(tenant, server, sealed, renewed):
            stored = await self._stored(tenant, server)  # replaced meanwhile (a new connect): that one counts
            return None if stored is None or stored[1].needs_connect else stored[1]
        return None if renewed.needs_connect else renewed


def _just_refreshed(credential: Credential) -> bool:
    """Whether the token came from a refresh (not the connect itself) moments ago."""
    issued = credential.issued_at
    return issued is not None and issued > credential.set_at and time.time() - issued < _JUST_REFRESHED_SECONDS
