"""Running items' latest progress, one hash per batch (item index -> JSON): written by the worker running the item
(throttled there), deleted by it when the call ends, read by the doors. Advisory: a lost write only shows older
progress, so nothing here is atomic with the batch's own state."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from mcp_batch.keys import PROGRESS_TTL_SECONDS, Keys


class Progress:
    """The `progress` hash of each batch."""

    def __init__(self, redis: Redis, keys: Keys, ttl_ms: int = PROGRESS_TTL_SECONDS * 1000) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl_ms = ttl_ms

    async def put(self, batch_id: str, index: int, report: dict[str, Any]) -> None:
        """Store an item's latest report (item_progress.stored), in one round trip."""
        key = self._keys.progress(batch_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, str(index), orjson.dumps(report).decode())
            pipe.pexpire(key, self._ttl_ms)
            await pipe.execute()

    async def clear(self, batch_id: str, index: int) -> None:
        await cast(Awaitable[int], self._redis.hdel(self._keys.progress(batch_id), str(index)))

    async def of(self, batch_id: str, indexes: list[int]) -> dict[int, dict[str, Any]]:
        """The stored reports of these items (those that have one)."""
        if not indexes:
            return {}
        key = self._keys.progress(batch_id)
        raw = await cast(Awaitable[list[bytes | None]], self._redis.hmget(key, [str(i) for i in indexes]))
        return {index: orjson.loads(value) for index, value in zip(indexes, raw, strict=True) if value is not None}

    async def every(self, batch_id: str) -> dict[int, dict[str, Any]]:
        """Every stored report of the batch (one per item running with progress: at most its concurrency)."""
        raw = await cast(Awaitable[dict[bytes, bytes]], self._redis.hgetall(self._keys.progress(batch_id)))
        return {int(index): orjson.loads(value) for index, value in raw.items()}
