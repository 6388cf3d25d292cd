"""Each tenant's index of its batches, newest first: `GET /v1/batches` (`Store.tenants`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import cast

from redis.asyncio import Redis

from mcp_batch.errors import BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import (
    FAILED_ITEM,
    HALTED,
    TERMINAL_BATCH,
    BatchStatus,
    BatchSummary,
    ItemStatus,
    Priority,
)
from mcp_batch.records import iso
from mcp_batch.store.batch_row import LIST_FIELDS, load_metadata, past_deadline

_ENDED = [ItemStatus(field.removeprefix("n:")) for field in LIST_FIELDS[11:]]  # the counts' statuses, in order
_LIST_SCAN = 1_000  # most index entries one listing request reads (a status filter may skip many)


@dataclass(frozen=True)
class Filters:
    """What a listing keeps: batches with every one of these metadata pairs, created after and before these times
    (µs, both exclusive; None: unbounded)."""

    metadata: Mapping[str, str] = field(default_factory=dict)
    created_after: int | None = None
    created_before: int | None = None


def _summary(batch_id: str, row: list[str | None], now: float) -> BatchSummary:
    """From the meta fields LIST_FIELDS; a batch past its deadline as a reader sees it (`BatchRow.as_of`)."""
    status, total, finished, created, ended, retry_of, deadline, claimed, halt, metadata, priority = row[:11]
    by_status = {item: int(count or 0) for item, count in zip(_ENDED, row[11:], strict=True)}
    listed = BatchStatus(status or BatchStatus.queued)
    passed = past_deadline(listed, None if deadline is None else float(deadline), halt, now)
    if passed and int(claimed or 0) <= int(finished or 0):
        listed, ended, halt = BatchStatus.expired, deadline, "expire"
    if listed in TERMINAL_BATCH and halt in HALTED:  # the items that never ran, as the document counts them
        by_status[HALTED[halt]] += int(total or 0) - int(finished or 0)
    return BatchSummary(
        id=batch_id,
        status=listed,
        total=int(total or 0),
        finished=int(finished or 0),
        succeeded=by_status[ItemStatus.ok],
        failed=sum(by_status[item] for item in FAILED_ITEM),
        not_run=sum(by_status[item] for item in (ItemStatus.skipped, ItemStatus.cancelled, ItemStatus.expired)),
        created_at=iso(float(created or 0)) or "",
        finished_at=iso(float(ended)) if ended else None,
        retry_of=retry_of,
        metadata=load_metadata(metadata),
        priority=Priority(priority or Priority.normal),
    )


class TenantIndex:
    """Who owns a batch, and a tenant's batches."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def tenant_of(self, batch_id: str) -> str:
        """The tenant that owns a batch (BatchNotFound when there is no such batch)."""
        raw = await cast(Awaitable[bytes | None], self.redis.hget(self.keys.batch(batch_id), "tenant"))
        if raw is None:
            raise BatchNotFound(batch_id)
        return raw.decode()

    async def batches_of(
        self,
        tenant: str,
        before: int | None,
        limit: int,
        status: set[BatchStatus] | None,
        where: Filters | None = None,
    ) -> tuple[list[BatchSummary], int | None]:
        """A tenant's batches, newest first, created before `before` (µs); and the cursor of the next page.

        With `where`, only those created in its time range with all of its metadata pairs: read from the index of
        the pair with the fewest batches (each pair has its own, scored as the tenant's list), each batch then
        checked for the other pairs, so a filtered listing reads what that pair holds, not the tenant's every batch.
        Ids whose batch has expired are dropped from the index read as they are met."""
        where = where or Filters()
        index = await self._narrowest(tenant, where.metadata)
        if index is None:
            return [], None
        found: list[BatchSummary] = []
        bounds = [bound for bound in (before, where.created_before) if bound is not None]
        upper: str = f"({min(bounds)}" if bounds else "+inf"
        lower = "-inf" if where.created_after is None else f"({where.created_after}"
        scanned, now = 0, time.time()
        while len(found) < limit and scanned < _LIST_SCAN:
            page = await self.redis.zrevrangebyscore(index, upper, lower, start=0, num=limit, withscores=True)
            if not page:
                return found, None
            async with self.redis.pipeline(transaction=False) as pipe:
                for member, _ in page:
                    pipe.hmget(self.keys.batch(member.decode()), LIST_FIELDS)
                rows = await pipe.execute()
            gone = []
            for (member, score), row in zip(page, rows, strict=True):
                scanned += 1
                upper = f"({int(score)}"
                if row[0] is None:
                    gone.append(member)
                    continue
                summary = _summary(member.decode(), [v.decode() if v else None for v in row], now)
                if (status is None or summary.status in status) and where.metadata.items() <= summary.metadata.items():
                    found.append(summary)
                    if len(found) == limit:
                        return found, int(score)
            if gone:
                await self.redis.zrem(index, *gone)
        return found, int(upper[1:]) if upper.startswith("(") else None

    async def _narrowest(self, tenant: str, pairs: Mapping[str, str]) -> str | None:
        """The index to read: the tenant's list, or its smallest index of one of `pairs` (None: one is empty)."""
        if not pairs:
            return self.keys.tenant_batches(tenant)
        indexes = [self.keys.tenant_metadata(tenant, key, value) for key, value in pairs.items()]
        async with self.redis.pipeline(transaction=False) as pipe:
            for index in indexes:
                pipe.zcard(index)
            sizes = await pipe.execute()
        size, index = min(zip(sizes, indexes, strict=True))
        return index if size else None
