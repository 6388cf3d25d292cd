"""GET /metrics: this API process's counters and the shared state read from Redis, in Prometheus text format.

With auth on, a scrape needs a key or token with the `admin` right (service/auth.py checks it), unless
MCP_BATCH_METRICS_PUBLIC is true. The gauges of
the shared state are read from Redis at scrape time; while Redis is down the scrape still answers, with the process's
own counters and `mcp_batch_redis_up 0`.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import RedisError

from mcp_batch.store import overview
from service.deps import ServicesDep

router = APIRouter()

_READ_SECONDS = 2.0  # a Redis that does not answer within this is down as far as this scrape goes


@router.get("/metrics", include_in_schema=False)
async def metrics(services: ServicesDep) -> Response:
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
