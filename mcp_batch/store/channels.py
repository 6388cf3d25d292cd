"""One pub/sub subscription per process, fanned out to local waiters.

A GET that waits, or an idle worker, watches an asyncio.Event instead of holding its own Redis connection or
polling. After a reconnect every watcher is woken once, since messages published while disconnected are lost:
watchers re-check the state they wait on, so a spurious wake is harmless and a missed one is impossible.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mcp_batch.store.outage import backoff

logger = logging.getLogger(__name__)

ANY = "*"  # watch key that every message wakes


class Listener:
    """Subscribes to one channel; each message wakes the watchers of its payload (and of ANY)."""

    def __init__(self, redis: Redis, channel: str, max_backoff: float = 5.0) -> None:
        self._redis = redis
        self._channel = channel
        self._max_backoff = max_backoff
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.subscribed = asyncio.Event()

    async def start(self, timeout: float = 10.0) -> None:
        """Start listening; returns once the subscription is confirmed by Redis."""
        self._task = asyncio.create_task(self._run(), name=f"listener:{self._channel}")
        async with asyncio.timeout(timeout):
            await self.subscribed.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @contextmanager
    def watch(self, key: str = ANY) -> Iterator[asyncio.Event]:
        """An event set when a message with payload `key` arrives (ANY: any message) while the block runs."""
        event = asyncio.Event()
        self._watchers.setdefault(key, set()).add(event)
        try:
            yield event
        finally:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.discard(event)
                if not watchers:
                    del self._watchers[key]

    def _wake(self, key: str | None) -> None:
        targets = list(self._watchers) if key is None else [key, ANY]
        for target in targets:
            for event in self._watchers.get(target, ()):
                event.set()

    async def _run(self) -> None:
        # Ends only by cancellation: a lost subscription (Redis restarted, a connection cut) is taken again, with
        # backoff, for as long as it takes; watchers fall back on their own timeouts meanwhile. One warning per loss.
        delays, lost = backoff(cap=self._max_backoff), False
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    async for message in pubsub.listen():
                        if message["type"] == "subscribe":
                            if self.subscribed.is_set():
                                logger.info("subscribed to %s again", self._channel)
                                self._wake(None)  # resubscribed: anything may have happened meanwhile
                            self.subscribed.set()
                            delays, lost = backoff(cap=self._max_backoff), False
                        elif message["type"] == "message":
                            self._wake(message["data"].decode())
            except (RedisError, OSError) as exc:
                if not lost:
                    logger.warning("lost subscription to %s (%s); subscribing again", self._channel, type(exc).__name__)
                lost = True
            except Exception:  # a bug here must not silence the channel for the rest of the process
                logger.exception("listener on %s failed; subscribing again", self._channel)
            await asyncio.sleep(next(delays))
