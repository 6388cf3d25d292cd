"""GET /healthz: the API is up and reaches Redis (a readiness check: 503 while Redis is down or still loading)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from ..deps import ServicesDep

router = APIRouter(tags=["health"])

_PING_SECONDS = 2.0  # a Redis that does not answer (a network partition) is down as far as readiness goes


@router.get("/healthz", summary="The API can reach Redis")
async def healthz(services: ServicesDep) -> JSONResponse:
    try:
        async with asyncio.timeout(_PING_SECONDS):
            await services.redis.ping()
    except (RedisError, OSError):  # OSError includes the timeout
        return JSONResponse({"status": "unavailable", "redis": False}, status_code=503)
    return JSONResponse({"status": "ok", "redis": True})
