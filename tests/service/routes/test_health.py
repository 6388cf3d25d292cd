"""/healthz and /readyz against the real API and a real worker, and the worker heartbeats readiness counts."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.overview import FORGET_SECONDS, Heartbeat
from tests.support import eventually, running_api, running_worker


async def redis_seconds(redis: aioredis.Redis) -> float:
    seconds, micros = await redis.time()
    return float(seconds) + micros / 1e6


async def test_healthz_says_redis_answers(settings: Settings) -> None:
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        response = await http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok", "redis": True}


async def test_readyz_is_503_without_a_worker(settings: Settings) -> None:
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        response = await http.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert "writes_may_repeat_after_host_crash" in body.pop("durability")  # its mode: see test_durability.py
    assert body == {
        "status": "unavailable",
        "redis": True,
        "workers": 0,
        "reason": "no worker has sent a heartbeat in the last 30 s",
    }


async def test_readyz_is_200_with_a_worker(settings: Settings) -> None:
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        async with running_worker(settings):
            response = await http.get("/readyz")
        assert response.status_code == 200
        body = response.json()
        assert "mode" in body.pop("durability")
        assert body == {"status": "ready", "redis": True, "workers": 1}
        assert (await http.get("/readyz")).status_code == 503  # a stopped worker leaves the set at once


async def test_a_worker_silent_past_the_window_does_not_make_the_service_ready(
    settings: Settings, redis: aioredis.Redis
) -> None:
    now = await redis_seconds(redis)
    await redis.zadd(Keys().workers, {"gone:1": (now - 31) * 1000})
    short = settings.model_copy(update={"ready_worker_seconds": 30.0})
    async with running_api(short) as base_url, httpx.AsyncClient(base_url=base_url) as http:
        response = await http.get("/readyz")
    assert response.status_code == 503 and response.json()["workers"] == 0


async def test_an_idle_worker_beats_every_second(settings: Settings, redis: aioredis.Redis) -> None:
    assert settings.worker_idle_poll_seconds == 30  # the queue poll waits this long; the heartbeat does not
    async with running_worker(settings) as worker:
        member = worker.ctx["state"].worker_id
        first = await redis.zscore(Keys().workers, member)

        async def beaten() -> bool:
            return await redis.zscore(Keys().workers, member) != first

        await eventually(beaten, what="a second heartbeat", timeout=5)


async def test_a_heartbeat_forgets_workers_silent_for_minutes(redis: aioredis.Redis) -> None:
    now = await redis_seconds(redis)
    await redis.zadd(Keys().workers, {"long-gone:1": (now - FORGET_SECONDS - 1) * 1000, "stale:2": (now - 60) * 1000})
    await Heartbeat(redis, Keys(), "live:3").beat()
    members = {m.decode() for m in await redis.zrange(Keys().workers, 0, -1)}
    assert members == {"stale:2", "live:3"}  # a stale worker is still shown (by status) until it is forgotten
