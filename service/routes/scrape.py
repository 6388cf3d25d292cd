"""GET /metrics: this API process's counters and the shared state read from Redis, in Prometheus text format.

With auth on, a scrape needs an API key like any other route, unless MCP_BATCH_METRICS_PUBLIC is true. The gauges of
the shared state are read from Redis at scrape time; while Redis is down the scrape still answers, with the process's
own counters and `mcp_batch_redis_up 0`.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import RedisError

from mcp_batch.store import overview
from service.auth import identify
from service.deps import ServicesDep

router = APIRouter()

_READ_SECONDS = 2.0  # a Redis that does not answer within this is down as far as this scrape goes


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, services: ServicesDep) -> Response:
    if not services.settings.metrics_public:
        identify(request.headers.get("authorization"), request.app.state.keyring)  # 401 without a valid key
    settings = services.settings
    try:
        async with asyncio.timeout(_READ_SECONDS):
            state = await overview.read(
                services.redis, services.keys, services.registry, settings.default_timeout_seconds, services.store.data
            )
    except (RedisError, OSError):  # OSError includes the timeout
        state = None
    body = services.metrics.render(state, settings.ready_worker_seconds)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
