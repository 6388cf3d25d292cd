"""GET /v1/servers: the configured backends with their tools, never their headers or env."""

from __future__ import annotations

from fastapi import APIRouter

from mcp_batch.models import ServerInfo
from service.application.backends_info import describe_servers
from service.auth import AUTH_RESPONSES, CallerDep
from service.deps import ServicesDep

router = APIRouter(prefix="/v1", tags=["servers"], responses=AUTH_RESPONSES)


@router.get("/servers", summary="Configured backends and their tools")
async def list_servers(services: ServicesDep, caller: CallerDep) -> list[ServerInfo]:
    """Each backend the caller's key may call: transport, timeout, limits and their current use, cached tools."""
    return await describe_servers(services, caller)
