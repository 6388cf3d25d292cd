"""Riding out a Redis outage: retry a call with exponential backoff and jitter until Redis answers again.

A restarted Redis refuses connections, then answers LOADING while it replays its append-only file; both are
transient. What a worker holds in memory (a finished item's record, a queue poll) waits here for Redis instead of
being dropped. Only the errors that mean "Redis is not reachable now" are retried; any other error is a bug or a
real answer and goes straight up. One warning per outage per process, and one line when Redis is back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ConnectionError,
    MasterDownError,
    RedisClusterException,
    TimeoutError,
    TryAgainError,
)

logger = logging.getLogger(__name__)
_JITTER = random.Random()  # its own state: jitter never moves the random module's global one

T = TypeVar("T")
P = ParamSpec("P")

# A cluster whose slot has no master yet (a failover under way) is down the same way, for as long as it lasts.
REDIS_DOWN: tuple[type[Exception], ...] = (
    ConnectionError,
    TimeoutError,
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    TryAgainError,
    RedisClusterException,
)
"""redis-py's errors for an unreachable, timed-out or still-loading server (socket errors arrive as these)."""


def backoff(first: float = 0.05, cap: float = 2.0) -> Iterator[float]:
    """Endless delays doubling from `first` up to `cap`, each drawn from [d/2, d] so retrying clients spread out."""
    delay = first
    while True:
        yield _JITTER.uniform(delay / 2, delay)
        delay = min(delay * 2, cap)


class _Outage:
    """Whether this process currently sees Redis down: so that many waiting calls log one line, not one each."""

    def __init__(self) -> None:
        self.since: float | None = None

    def failed(self, exc: Exception) -> None:
        if self.since is None:
            self.since = time.monotonic()
            logger.warning("Redis is unreachable (%s: %s); retrying until it is back", type(exc).__name__, exc)

    def answered(self) -> None:
        if self.since is not None:
            logger.info("Redis is back after %.1fs", time.monotonic() - self.since)
            self.since = None


_outage = _Outage()


async def with_redis_retry(fn: Callable[[], Awaitable[T]], *, outage: float, cap: float = 2.0) -> T:
    """`await fn()`, retried while Redis is unreachable; the last error is raised once the outage (counted from
    this call's first failure) has lasted `outage` seconds. `fn` must be safe to repeat."""
    delays: Iterator[float] | None = None
    give_up = 0.0
    while True:
        try:
            result = await fn()
        except REDIS_DOWN as exc:
            now = time.monotonic()
            if delays is None:
                delays, give_up = backoff(cap=cap), now + outage
            _outage.failed(exc)
            if now >= give_up:
                raise
            await asyncio.sleep(min(next(delays), give_up - now))
            continue
        _outage.answered()
        return result


def redis_retried(
    *, outage: float, cap: float = 2.0
) -> Callable[[Callable[P, Coroutine[Any, Any, T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """`with_redis_retry` around every call of the decorated coroutine function (which must be safe to repeat)."""

    def decorate(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(fn)
        async def retried(*args: P.args, **kwargs: P.kwargs) -> T:
            return await with_redis_retry(lambda: fn(*args, **kwargs), outage=outage, cap=cap)

        return retried

    return decorate
