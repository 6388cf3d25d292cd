"""Tenants' credentials for backends: set a secret, list, delete (every door goes through here). Setting and deleting
need the `credentials` right; listing is `read`. A value never leaves: the listing says what is held, not what."""

from __future__ import annotations

import logging
import re

from pydantic import BaseModel, Field, SecretStr, field_validator

from mcp_batch.backends.servers_file import Backend, connect_route, per_tenant
from mcp_batch.credentials.record import Credential, CredentialInfo, CredentialKind
from mcp_batch.dry_runs import ConnectNeeded
from mcp_batch.errors import CredentialNotAccepted, CredentialNotFound, SealBroken
from mcp_batch.tenants import Caller, Right, require
from service.application.services import Services

logger = logging.getLogger(__name__)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SecretBody(BaseModel):
    """`PUT /v1/credentials/{server}`: the tenant's secret for a server with `tenant` auth."""

    model_config = {"extra": "forbid"}

    secret: SecretStr = Field(
        min_length=1, max_length=16_384, json_schema_extra={"pattern": "^[^\\x00-\\x1f\\x7f]+$", "writeOnly": True}
    )

    @field_validator("secret")
    @classmethod
    def _no_control_characters(cls, secret: SecretStr) -> SecretStr:
        # It goes into a header or an environment variable as it is: a line break there would forge another one.
        if _CONTROL.search(secret.get_secret_value()):
            raise ValueError("a secret holds no control character (no line break, tab or NUL)")
        return secret


def _backend(services: Services, caller: Caller, server: str) -> Backend:
    backend = services.registry.get(server)
    if backend is None or not caller.may_call(server):  # a server the key may not call is as missing as none
        raise CredentialNotFound(server)
    return backend


async def set_secret(services: Services, caller: Caller, server: str, body: SecretBody) -> None:
    """Store the tenant's secret for `server` (replacing one it had), sealed; its next calls carry it."""
    require(caller, Right.credentials, "setting a credential")
    backend = _backend(services, caller, server)
    if backend.auth is None or backend.auth.type != "tenant":
        if backend.auth is not None and backend.auth.type == "oauth":
            raise CredentialNotAccepted(f"server {server!r} takes an OAuth grant: {connect_route(server, backend)}")
        raise CredentialNotAccepted(f"server {server!r} takes no credential from tenants: its calls use the service's")
    await services.store.credentials.put(caller.tenant, server, Credential.of_secret(body.secret))


async def list_credentials(services: Services, caller: Caller) -> list[CredentialInfo]:
    """The tenant's credentials, by server: what kind, since when, and for OAuth until when and which scopes."""
    if not services.store.credentials.configured:
        return []
    held = await services.store.credentials.list(caller.tenant)
    return [credential.info(server) for server, credential in held.items() if caller.may_call(server)]


async def delete_credential(services: Services, caller: Caller, server: str) -> None:
    """Forget the tenant's credential for `server`; an OAuth grant is also revoked where its server offers it.
    CredentialNotFound when there is none."""
    require(caller, Right.credentials, "deleting a credential")
    backend = _backend(services, caller, server)
    removed = (
        await services.store.credentials.delete(caller.tenant, server)
        if services.store.credentials.configured
        else None
    )
    if removed is None:
        raise CredentialNotFound(server)
    if removed.kind is CredentialKind.oauth:
        try:
            await services.revoker.revoke(caller.tenant, server, backend, removed)
        except Exception as exc:  # forgotten here all the same; the authorization server lets the grant lapse
            logger.warning("could not revoke the deleted grant for %s: %s", server, type(exc).__name__)


async def connections_needed(services: Services, caller: Caller, servers: set[str]) -> list[ConnectNeeded]:
    """The servers among `servers` that take the tenant's own credential and have none usable (a batch's dry run)."""
    needed = []
    for server in sorted(servers):
        backend = services.registry.get(server)
        if backend is None or not per_tenant(backend):
            continue
        credential = None
        if services.store.credentials.configured:
            try:
                credential = await services.store.credentials.get(caller.tenant, server)
            except SealBroken:
                credential = None
        if credential is None or credential.needs_connect:
            reason = "missing" if credential is None else "needs_connect"
            needed.append(ConnectNeeded(server=server, connect=connect_route(server, backend), reason=reason))
    return needed
