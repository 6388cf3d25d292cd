"""The connection pool tenants' HTTP sessions share, against the real demo backend: a session's client closing
leaves the pool open for the others, and after a burst it keeps few idle connections (each request's pass over the
pool probes every idle one, so a long tail of them made later calls dearer)."""

from __future__ import annotations

import asyncio

import httpx2

from mcp_batch.backends.presented import SharedPool
from tests.support import HttpBackendProcess


async def test_a_burst_leaves_at_most_eight_idle_connections_and_a_closed_client_leaves_the_pool_open(
    http_backend: HttpBackendProcess,
) -> None:
    pool = SharedPool()
    try:
        clients = [httpx2.AsyncClient(transport=pool, timeout=30) for _ in range(20)]
        answers = await asyncio.gather(*(client.get(http_backend.url) for client in clients))
        assert all(answer.status_code < 500 for answer in answers)
        # httpx2's transport holds its httpcore2 pool privately (pinned in uv.lock): the count is only there
        connections = pool._pool.connections
        assert 1 <= len(connections) <= 8 and all(c.is_idle() for c in connections)
        await asyncio.gather(*(client.aclose() for client in clients))
        async with httpx2.AsyncClient(transport=pool, timeout=30) as another:
            assert (await another.get(http_backend.url)).status_code < 500
    finally:
        await pool.close_pool()
