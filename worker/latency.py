"""The worker's part of the latency sample the dry run's estimate reads: each finished call's `elapsed_seconds` is
kept in memory, per tenant (a tenant's estimate reads only its own calls'), and at most once a second, within a
second of a call's end, the latencies gathered go to Redis in one pipeline, off the lanes (a lane never waits for
it). Per item this costs an append; bench/cost.py measures it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from redis.exceptions import RedisError

from mcp_batch.records import ItemRecord
from mcp_batch.store.latency import SAMPLE, Latencies

logger = logging.getLogger(__name__)

_EVERY = 1.0  # seconds between two writes of the sample


class LatencySampler:
    """Gathers call latencies per (server, tool) and writes them now and then."""

    def __init__(self, latencies: Latencies, every: float = _EVERY) -> None:
        self._latencies = latencies
        self._every = every
        self._pending: dict[tuple[str, str, str], list[float]] = {}
        self._last = 0.0
        self._writing: asyncio.Task[None] | None = None
        self._waiting = False  # the write in `_writing` is still waiting for its turn

    def note(self, server: str, tool: str, tenant: str, record: ItemRecord) -> None:
        """A finished item: its backend call's latency joins the sample (items that never called it do not)."""
        elapsed = record.get("elapsed_seconds")
        if elapsed is None or not record.get("attempts"):
            return
        seconds = self._pending.setdefault((server, tool, tenant), [])
        seconds.append(elapsed)
        if len(seconds) > SAMPLE:
            del seconds[0]
        if self._writing is None:  # a write at most once a second, and within a second of the call's end
            wait = max(0.0, self._last + self._every - time.monotonic())
            self._writing = asyncio.create_task(self._write(wait))

    async def close(self) -> None:
        """Write what is gathered (a worker stopping), now."""
        if self._writing is not None:
            if self._waiting:  # nothing taken yet: what it would write is written below
                self._writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writing
        if self._pending:
            await self._write()

    async def _write(self, wait: float = 0.0) -> None:
        if wait:
            self._waiting = True
            try:
                await asyncio.sleep(wait)
            finally:
                self._waiting = False
        self._last = time.monotonic()
        pending, self._pending = self._pending, {}
        try:
            await self._latencies.add(pending)
        except (RedisError, OSError) as exc:  # a sample lost is a slightly older estimate, nothing more
            logger.info("could not write the latency sample: %s", type(exc).__name__)
        finally:
            self._writing = None
