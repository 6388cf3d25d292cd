"""GET /healthz: the API is up and reaches Redis."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from ..deps import ServicesDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The API can reach Redis")
async def healthz(services: ServicesDep) -> JSONResponse:
    try:
        await services.redis.ping()
    except (RedisError, OSError):
        return JSONResponse({"status": "unavailable", "redis": False}, status_code=503)
    return JSONResponse({"status": "ok", "redis": True})
