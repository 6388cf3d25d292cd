"""The service's own OAuth token for `oauth_client_credentials` backends (the `MachineTokens` of
credentials/hooks.py): one token per server for every tenant, fetched with the client-credentials grant, kept sealed
in Redis so every worker shares it, cached in the process, and fetched again before it expires (one worker at a
time) or when the backend refuses it."""

from __future__ import annotations

import asyncio
import time

import httpx2
import orjson
from pydantic import SecretStr

from mcp_batch.backends.servers_file import Backend, ClientCredentialsAuth
from mcp_batch.credentials import grants
from mcp_batch.credentials.record import Credential, CredentialKind, refresh_due
from mcp_batch.credentials.sealing import Sealer
from mcp_batch.errors import BackendError, BackendUnauthenticated, OAuthGrantRefused, OAuthUnavailable, SealBroken
from mcp_batch.store.oauth import OAuthStates
from worker.token_refresh import LOCK_SECONDS

_MACHINE = ""  # the pseudo-tenant the machine token is sealed and locked under: no tenant's


class ClientCredentialTokens:
    """Each `oauth_client_credentials` server's current token."""

    def __init__(self, states: OAuthStates, sealer: Sealer | None, margin: float, timeout: float) -> None:
        self.states = states
        self.sealer = sealer
        self.margin = margin
        self.timeout = timeout
        self._known: dict[str, Credential] = {}

    def _seal(self, server: str, credential: Credential) -> bytes | None:
        if self.sealer is None:
            return None
        data = credential.model_dump(mode="json")  # SecretStr dumps masked: the one value it holds goes in below
        data["access_token"] = credential.access_token.get_secret_value() if credential.access_token else None
        return self.sealer.seal(orjson.dumps(data), _MACHINE, f"oauth-machine:{server}")

    def _open(self, server: str, sealed: bytes | None) -> Credential | None:
        if sealed is None or self.sealer is None:
            return None
        try:
            return Credential.model_validate_json(self.sealer.open(sealed, _MACHINE, f"oauth-machine:{server}"))
        except SealBroken:
            return None

    async def token(self, server: str, backend: Backend) -> SecretStr:
        auth = getattr(backend, "auth", None)
        if not isinstance(auth, ClientCredentialsAuth):
            raise BackendUnauthenticated(f"server {server!r} has no client-credentials auth")
        known = self._known.get(server)
        if known is None or refresh_due(known, self.margin):
            known = await self._fetch(server, auth)
        assert known.access_token is not None
        return known.access_token

    async def invalidate(self, server: str) -> None:
        self._known.pop(server, None)
        await self.states.put_machine(server, None)

    async def _fetch(self, server: str, auth: ClientCredentialsAuth) -> Credential:
        deadline = time.monotonic() + LOCK_SECONDS
        while True:
            stored = self._open(server, await self.states.get_machine(server))
            if stored is not None and not refresh_due(stored, self.margin):
                self._known[server] = stored
                return stored
            holder = await self.states.lock(_MACHINE, f"machine.{server}", LOCK_SECONDS)
            if holder is None:
                if time.monotonic() > deadline:
                    raise BackendError("the service's token is being fetched by a stuck worker", transient=True)
                await asyncio.sleep(0.05)
                continue
            try:
                stored = self._open(server, await self.states.get_machine(server))
                if stored is not None and not refresh_due(stored, self.margin):
                    self._known[server] = stored
                    return stored
                fetched = await self._grant(server, auth)
                sealed = self._seal(server, fetched)
                if sealed is not None:
                    await self.states.put_machine(server, sealed)
                self._known[server] = fetched
                return fetched
            finally:
                await self.states.unlock(_MACHINE, f"machine.{server}", holder)

    async def _grant(self, server: str, auth: ClientCredentialsAuth) -> Credential:
        async with httpx2.AsyncClient(timeout=self.timeout) as http:
            try:
                token = await grants.client_credentials(http, server, auth)
            except OAuthGrantRefused as exc:
                raise BackendUnauthenticated(str(exc)) from None
            except OAuthUnavailable as exc:
                raise BackendError(str(exc), transient=True) from None
        now = time.time()
        expires = now + token.expires_in if token.expires_in is not None else None
        return Credential(
            kind=CredentialKind.oauth,
            access_token=SecretStr(token.access_token),
            expires_at=expires,
            issued_at=now,
            scopes=token.scope.split() if token.scope else list(auth.scopes),
        )
