"""GET /v1/servers: the configured backends with their tools, never their headers or env."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from ..core.models import ServerInfo
from ..deps import ServicesDep

router = APIRouter(prefix="/v1", tags=["servers"])


@router.get("/servers", summary="Configured backends and their tools")
async def list_servers(services: ServicesDep) -> list[ServerInfo]:
    async def describe(name: str) -> ServerInfo:
        info = services.registry.info(name, services.settings.default_timeout_seconds)
        backend = services.registry.get(name)
        if backend is not None and backend.max_concurrency:
            info.in_flight = await services.leases.in_use(name)
        if backend is not None and backend.rate_limit:
            info.rate_tokens_available = round(await services.rate.tokens(name, backend.rate_limit), 3)
        try:
            info.tools = await services.catalog.tools(name)
        except Exception as exc:  # one unreachable backend must not hide the others
            info.tools_error = f"could not list tools: {type(exc).__name__}"
        return info

    return list(await asyncio.gather(*(describe(n) for n in services.registry.names)))
