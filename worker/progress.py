"""A running item's progress notifications, relayed to the store: at most `per_second` writes, always the latest.

One relay per call, handed to the SDK as the call's progress callback (the SDK runs each notification's callback as
a task of its own). A call whose backend never reports progress costs the relay's construction and one check at
the end: no task, no Redis command. Once a report has been written, the call's end deletes it, after any write
still in flight, so a finished item never shows progress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress

from redis.exceptions import RedisError

from mcp_batch import item_progress
from mcp_batch.store.progress import Progress

logger = logging.getLogger(__name__)


class ProgressRelay:
    """The progress of one item's call (`__call__` is the SDK's `ProgressFnT`)."""

    __slots__ = ("_batch_id", "_ending", "_flusher", "_index", "_interval", "_item_id", "_latest", "_store", "_wrote")

    def __init__(self, store: Progress, batch_id: str, index: int, item_id: str, per_second: float) -> None:
        self._store, self._batch_id, self._index, self._item_id = store, batch_id, index, item_id
        self._interval = 1.0 / per_second
        self._latest: dict[str, object] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._ending: asyncio.Event | None = None  # made with the first report: a silent call never needs it
        self._wrote = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self._ending is None:
            self._ending = asyncio.Event()
        elif self._ending.is_set():
            return  # a late notification: the call has ended
        self._latest = item_progress.stored(self._item_id, progress, total, message, time.time())
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(self._ending), name=f"progress:{self._batch_id}")

    async def _flush(self, ending: asyncio.Event) -> None:
        # Writes the latest report, then holds off for one interval: reports meanwhile only replace the latest.
        while self._latest is not None and not ending.is_set():
            report, self._latest = self._latest, None
            try:
                await self._store.put(self._batch_id, self._index, report)
                self._wrote = True
            except (RedisError, OSError) as exc:  # progress is advisory: the call goes on
                logger.debug("could not store the progress of item %s: %s", self._item_id, type(exc).__name__)
            with suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await ending.wait()

    async def close(self) -> None:
        """The call has ended: stop relaying and delete what was written."""
        if self._ending is None:
            return
        self._ending.set()
        if self._flusher is not None:
            await self._flusher  # a write in flight lands before the delete below
        if self._wrote:
            try:
                await self._store.clear(self._batch_id, self._index)
            except (RedisError, OSError) as exc:  # readers ignore the progress of a finished item anyway
                logger.debug("could not clear the progress of item %s: %s", self._item_id, type(exc).__name__)
