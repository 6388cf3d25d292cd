"""GET /v1/servers: the configured backends with their tools, never their headers or env; GET /v1/overview: the
service's state (readiness, the queue, unfinished items, leases) as JSON."""

from __future__ import annotations

from fastapi import APIRouter

from mcp_batch.backend_info import ServerInfo
from service.application.backends_info import ServiceState, describe_servers, service_state
from service.auth import AUTH_RESPONSES, CallerDep
from service.deps import ServicesDep

router = APIRouter(prefix="/v1", tags=["servers"], responses=AUTH_RESPONSES)


@router.get("/servers", summary="Configured backends and their tools")
async def list_servers(services: ServicesDep, caller: CallerDep) -> list[ServerInfo]:
    """Each backend the caller's key may call: transport, timeout, limits and their current use, cached tools."""
    return await describe_servers(services, caller)


@router.get("/overview", summary="The service's state: live workers, the queue, unfinished items, leases")
async def get_overview(services: ServicesDep, caller: CallerDep) -> ServiceState:
    """What /readyz and /metrics tell, read from Redis at once, as JSON: whether a worker is live, shard jobs queued,
    unfinished items, job leases, and the concurrency leases held on each backend the caller's key may call."""
    return await service_state(services, caller)
