"""GET /healthz: the API is up and reaches Redis (503 while Redis is down or still loading). GET /readyz: the service
can run batches: Redis answers and at least one worker has sent a heartbeat lately. Neither needs an API key."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from mcp_batch.ops import durability
from mcp_batch.store import overview
from service.deps import ServicesDep

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


@router.get(
    "/readyz",
    summary="Redis answers and a worker is alive",
    description="200 `{status: ready, redis: true, workers: N, durability}` when Redis answers and N ≥ 1 workers sent "
    "a heartbeat within MCP_BATCH_READY_WORKER_SECONDS (30); 503 with `reason` otherwise. `durability`: Redis's "
    "persistence (`mode`, `appendonly`, `appendfsync`, `waitaof`) and `writes_may_repeat_after_host_crash`; the "
    "`replicas` online, what a write's claim waits for on them (`replica_wait`: `off`, `every replica seen`, `N "
    "replicas`) and `writes_may_repeat_after_failover`.",
)
async def readyz(services: ServicesDep) -> JSONResponse:
    within = services.settings.ready_worker_seconds
    try:
        async with asyncio.timeout(_PING_SECONDS):
            beats = await overview.workers(services.redis, services.keys)
        persistence = await durability.read(services.redis, services.settings)
    except (RedisError, OSError):
        return _unready(False, 0, "Redis does not answer")
    alive = [beat for beat in beats if beat.seconds_ago <= within]
    if not alive:
        return _unready(True, 0, f"no worker has sent a heartbeat in the last {within:g} s", persistence)
    body = {"status": "ready", "redis": True, "workers": len(alive), "durability": persistence.as_dict()}
    return JSONResponse(body)


def _unready(redis: bool, workers: int, reason: str, persistence: durability.Durability | None = None) -> JSONResponse:
    body: dict[str, Any] = {"status": "unavailable", "redis": redis, "workers": workers, "reason": reason}
    if persistence is not None:
        body["durability"] = persistence.as_dict()
    return JSONResponse(body, status_code=503)
