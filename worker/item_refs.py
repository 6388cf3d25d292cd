"""Calls that reference earlier calls wait for them, then run with the referenced values filled in.

Claims come in index order and a call can only reference earlier calls, so every call a lane waits for is already
claimed by some lane: waiting can never deadlock, and calls without references keep running in the other lanes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

from mcp_batch.contract.references import MissingPath, dependencies, may_reference, resolve, result_value
from mcp_batch.models import ItemStatus
from mcp_batch.records import ErrorInfo, error_info
from mcp_batch.store import Store
from mcp_batch.store.claims import Claim

_RECHECK = 1.0  # seconds: a dependency finished by another process is seen in Redis within this


@dataclass(frozen=True)
class Refused:
    """A call that ends before it is sent: a reference it cannot resolve."""

    status: ItemStatus
    error: ErrorInfo


class BatchReferences:
    """Per batch job: the results this job has seen finish, and waiting on them."""

    def __init__(self, store: Store, batch_id: str) -> None:
        self._store = store
        self._batch_id = batch_id
        self.batch_id = batch_id
        self._ids: dict[str, int] | None = None
        self._records: dict[int, Mapping[str, Any]] = {}
        self._changed = asyncio.Event()

    def finished(self, index: int, record: Mapping[str, Any]) -> None:
        # Kept until it is stored (a reference may need it before then), and after only once this job has met a
        # call with references: a batch without any must not hold every record it ran in memory (earlier records
        # are read from Redis when a reference needs them).
        self._records[index] = record
        self._changed.set()

    def stored(self, indexes: Sequence[int]) -> None:
        """These records are in Redis now: kept no longer unless references may need them."""
        if self._ids is None:
            for index in indexes:
                self._records.pop(index, None)

    async def prepare(self, claim: Claim) -> Claim | Refused:
        """The claim with its references resolved, or why it ends unsent (skipped, invalid_reference)."""
        if not may_reference(claim.arguments):
            return claim
        if self._ids is None:
            self._ids = await self._store.reads.id_index(self._batch_id)
        needed = dependencies(claim.arguments, self._ids, claim.index)
        if not needed:
            return claim
        records = await self._wait_for(needed)
        names = {index: name for name, index in self._ids.items()}
        for index in sorted(needed):
            if records[index]["status"] != ItemStatus.ok.value:
                message = f"depends on {names[index]!r}, which ended {records[index]['status']}"
                error = error_info("dependency_failed", message, "reference", depends_on=names[index])
                return Refused(ItemStatus.skipped, error)
        values = {index: result_value(records[index]) for index in needed}
        try:
            return replace(claim, arguments=resolve(claim.arguments, self._ids, claim.index, values))
        except MissingPath as exc:
            error = error_info("invalid_reference", str(exc), "reference", path=exc.path)
            return Refused(ItemStatus.invalid_reference, error)

    async def _wait_for(self, needed: set[int]) -> dict[int, Mapping[str, Any]]:
        while True:
            missing = [i for i in needed if i not in self._records]
            if missing:
                self._records.update(await self._store.reads.records(self._batch_id, missing))
            if all(i in self._records for i in needed):
                return {i: self._records[i] for i in needed}
            self._changed.clear()
            with suppress(TimeoutError):
                async with asyncio.timeout(_RECHECK):
                    await self._changed.wait()
