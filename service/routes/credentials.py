"""The tenant's credentials for backends: set a secret, list what is held (never a value), delete. Setting and
deleting need the key's `credentials` right; listing is `read`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from mcp_batch.credentials.record import CredentialInfo
from mcp_batch.models import ErrorDetail
from service.application import credentials
from service.application.credentials import SecretBody
from service.auth import AUTH_RESPONSES, CallerDep
from service.bodies import JSONLinesRoute
from service.deps import ServicesDep

router = APIRouter(prefix="/v1", tags=["credentials"], route_class=JSONLinesRoute, responses=AUTH_RESPONSES)

_NO_SERVER: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorDetail, "description": "No such server (or the key may not call it), or no credential for it."},
}


@router.put(
    "/credentials/{server}",
    status_code=204,
    summary="Set the tenant's secret for a backend",
    responses={
        204: {"description": "Stored, sealed: the tenant's next calls to the server carry it."},
        **_NO_SERVER,
        409: {"model": ErrorDetail, "description": "The server takes no secret from tenants (static, or OAuth)."},
    },
)
async def set_credential(server: str, body: SecretBody, services: ServicesDep, caller: CallerDep) -> Response:
    """For a server with `tenant` auth: the secret goes in the header (HTTP) or variable (stdio) the servers file
    names, on this tenant's calls only. Replaces the one set before. Needs the `credentials` right."""
    await credentials.set_secret(services, caller, server, body)
    return Response(status_code=204)


@router.get("/credentials", summary="The tenant's credentials for backends (never their values)")
async def list_credentials(services: ServicesDep, caller: CallerDep) -> list[CredentialInfo]:
    """Each server the tenant holds a credential for: its kind (`secret` or `oauth`), when it was set, and for an
    OAuth grant when its token expires, its scopes, and whether it must be connected again."""
    return await credentials.list_credentials(services, caller)


@router.delete(
    "/credentials/{server}",
    status_code=204,
    summary="Delete the tenant's credential for a backend",
    responses={
        204: {"description": "Deleted (an OAuth grant is also revoked where its server offers it)."},
        **_NO_SERVER,
    },
)
async def delete_credential(server: str, services: ServicesDep, caller: CallerDep) -> Response:
    """The tenant's calls to the server end `unauthenticated` until it sets one again. Needs the `credentials`
    right."""
    await credentials.delete_credential(services, caller, server)
    return Response(status_code=204)
