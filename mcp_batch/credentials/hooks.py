"""What an OAuth grant needs beyond storage, as seams: revoking a grant when its tenant deletes it, refreshing a
tenant's token, the service's own client-credentials token. The defaults do nothing an OAuth flow would: a deleted
grant is only forgotten, an expiring token is not refreshed (its items end `unauthenticated`), a machine identity has
no token. The OAuth flows implement these protocols and are handed in where the API and the worker are built."""

from __future__ import annotations

from typing import Protocol

from pydantic import SecretStr

from mcp_batch.backends.servers_file import Backend
from mcp_batch.credentials.record import Credential
from mcp_batch.errors import BackendUnauthenticated


class Revoker(Protocol):
    async def revoke(self, tenant: str, server: str, backend: Backend, credential: Credential) -> None:
        """Revoke a deleted grant at its authorization server (RFC 7009), where it offers revocation."""


class Refresher(Protocol):
    async def refresh(
        self, tenant: str, server: str, backend: Backend, read: bytes, credential: Credential
    ) -> Credential | None:
        """A fresh credential for one whose token expires or was refused (`read`: the sealed value it came from),
        stored before it is returned; None when it cannot be refreshed (then stored as `needs_connect`)."""


class MachineTokens(Protocol):
    async def token(self, server: str, backend: Backend) -> SecretStr:
        """The service's own access token for `server` (`oauth_client_credentials`), fetched and cached."""

    async def invalidate(self, server: str) -> None:
        """Forget the cached token: the backend refused it."""


class NoRevocation:
    async def revoke(self, tenant: str, server: str, backend: Backend, credential: Credential) -> None:
        return None


class NoRefresh:
    async def refresh(
        self, tenant: str, server: str, backend: Backend, read: bytes, credential: Credential
    ) -> Credential | None:
        return None


class NoMachineTokens:
    async def token(self, server: str, backend: Backend) -> SecretStr:
        raise BackendUnauthenticated(f"no client-credentials token source is configured for {server!r}")

    async def invalidate(self, server: str) -> None:
        return None
