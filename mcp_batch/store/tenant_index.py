"""Each tenant's index of its batches, newest first: `GET /v1/batches` (`Store.tenants`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import cast

from redis.asyncio import Redis

from mcp_batch.errors import BatchNotFound
from mcp_batch.keys import Keys
from mcp_batch.models import BatchStatus, BatchSummary, Priority
from mcp_batch.records import iso
from mcp_batch.store.batch_row import LIST_FIELDS, past_deadline

_LIST_SCAN = 1_000  # most index entries one listing request reads (a status filter may skip many)


def _summary(batch_id: str, row: list[str | None], now: float) -> BatchSummary:
    """From the meta fields LIST_FIELDS; a batch past its deadline as a reader sees it (`BatchRow.as_of`)."""
    status, total, finished, created, ended, retry_of, deadline, claimed, halt = row[:9]
    listed = BatchStatus(status or BatchStatus.queued)
    passed = past_deadline(listed, None if deadline is None else float(deadline), halt, now)
    if passed and int(claimed or 0) <= int(finished or 0):
        listed, ended = BatchStatus.expired, deadline
    return BatchSummary(
        id=batch_id,
        status=listed,
        total=int(total or 0),
        finished=int(finished or 0),
        created_at=iso(float(created or 0)) or "",
        finished_at=iso(float(ended)) if ended else None,
        retry_of=retry_of,
        priority=Priority(row[9] or Priority.normal),
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
        self, tenant: str, before: int | None, limit: int, status: set[BatchStatus] | None
    ) -> tuple[list[BatchSummary], int | None]:
        """A tenant's batches, newest first, created before `before` (µs); and the cursor of the next page.

        Ids whose batch has expired are dropped from the tenant's index as they are met."""
        index = self.keys.tenant_batches(tenant)
        found: list[BatchSummary] = []
        upper: str = f"({before}" if before is not None else "+inf"
        scanned, now = 0, time.time()
        while len(found) < limit and scanned < _LIST_SCAN:
            page = await self.redis.zrevrangebyscore(index, upper, "-inf", start=0, num=limit, withscores=True)
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
                if status is None or summary.status in status:
                    found.append(summary)
                    if len(found) == limit:
                        return found, int(score)
            if gone:
                await self.redis.zrem(index, *gone)
        return found, int(upper[1:]) if upper.startswith("(") else None
