"""A backend's tools as one caller sees them, for every door that shows them (`GET /v1/servers`, a batch's dry run,
the MCP door's proxy and `list_servers`, the dashboard).

A backend whose credential is the operator's has one list for everyone (the catalog). One that takes each tenant's
own credential is listed as the tenant: a short session carrying the tenant's credential, its answer cached for that
tenant under the hash of the sealed credential (mcp_batch/backends/catalog.py). A tenant without a usable credential
gets BackendUnauthenticated naming the route that gives one; it is never listed without.
"""

from __future__ import annotations

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.catalog import credential_tag
from mcp_batch.backends.presented import Presented
from mcp_batch.backends.servers_file import Backend, connect_route, per_tenant
from mcp_batch.errors import BackendUnauthenticated, SealBroken
from service.application.services import Services


async def tools_of(services: Services, server: str, tenant: str) -> list[ToolInfo]:
    """`server`'s tools as `tenant`'s calls would find them: cached, or listed now. KeyError for an unknown server,
    BackendUnauthenticated (with `connect`) when the backend wants the tenant's credential and has none it takes,
    BackendError or TimeoutError when it cannot be listed."""
    backend = services.registry.get(server)
    if backend is None:
        raise KeyError(server)
    if not per_tenant(backend):
        return await services.catalog.tools(server)
    credentials = services.store.credentials
    sealed = await credentials.get_sealed(tenant, server) if credentials.configured else None
    if sealed is None:
        raise _needs_connecting(server, backend, "the tenant has not connected it")
    tag = credential_tag(sealed)
    cached = await services.catalog.tenant_cached(server, tenant, tag)
    if cached is not None:
        return cached
    try:
        credential = credentials.open(tenant, server, sealed)
    except SealBroken:
        raise _needs_connecting(server, backend, "its stored credential opens under none of the keys") from None
    value = None if credential.needs_connect else credential.value()
    if value is None:
        raise _needs_connecting(server, backend, "the tenant's grant no longer works")
    try:
        return await services.catalog.tenant_fetch(server, tenant, tag, Presented(value, sealed))
    except BackendUnauthenticated:
        raise _needs_connecting(server, backend, "it refused the tenant's credential") from None


def _needs_connecting(server: str, backend: Backend, why: str) -> BackendUnauthenticated:
    route = connect_route(server, backend)
    return BackendUnauthenticated(f"needs connecting: {why} ({route})", route)
