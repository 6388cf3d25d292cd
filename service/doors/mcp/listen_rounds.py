"""The reads the listens of one API process share: a task's view read once per round, however many of its tenant's
listens follow it. Each listen re-reads its tasks every `events_check_seconds`; without sharing, N listens of the
same 100 tasks cost N times the reads of one. A view read less than a round ago is handed to every listen that asks
for it (its future, so listens asking at once wait for one read), per tenant, so no tenant ever gets another's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class Rounds(Generic[V]):
    """Views of tasks, each read at most once per round of `seconds` (unless asked `fresh`)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._read: dict[tuple[str, str], tuple[float, asyncio.Future[V]]] = {}

    async def view(self, tenant: str, task_id: str, read: Callable[[], Awaitable[V]], fresh: bool = False) -> V:
        """The task's view: this round's, or read now (`read`) for every listen that asks within the round."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        found = self._read.get((tenant, task_id))
        if found is not None and not fresh and now - found[0] < self._seconds:
            if found[1].done():  # read already: handed over as it is (a shield per listen per task costs a future)
                return found[1].result()
            return await asyncio.shield(found[1])
        self._read = {key: entry for key, entry in self._read.items() if now - entry[0] < self._seconds}
        future: asyncio.Future[V] = loop.create_future()
        self._read[tenant, task_id] = (now, future)
        try:
            future.set_result(await read())
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a listen that never asks again leaves no "never retrieved" warning
            self._read.pop((tenant, task_id), None)
            raise
        return future.result()
