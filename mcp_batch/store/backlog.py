"""What unfinished batches still ask of each backend: the queued work the dry run's estimate counts ahead of a new
batch. Read from the batches themselves (each stores its calls per server when it is submitted; its counters say how
many are left), found through the shard jobs' set: a batch is listed there from its submit until its last job ends,
so a cancel, an expiry or a recovery leaves nothing to correct. The read costs one HMGET per live batch: the jobs'
set on the control plane, then the batches on the data plane (on a cluster, one pipeline sent to each node)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from redis.asyncio import Redis

from mcp_batch import shards
from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_BATCH, BatchStatus, Priority

_FIELDS = ["status", "total", "claimed", "finished", "halt", "tenant", "calls_by_server"]
_MOST = 10_000  # live shard jobs read at most (more: the backlog counted is that of the oldest leases' batches)


@dataclass(frozen=True)
class Owner:
    """Whose a queued job's batch is, and its priority among that tenant's batches."""

    tenant: str
    priority: Priority = Priority.normal


@dataclass(frozen=True)
class Queued:
    """Items of unfinished batches not yet finished, per backend, and per backend for each tenant."""

    by_server: dict[str, int] = field(default_factory=dict)
    by_tenant: dict[tuple[str, str], int] = field(default_factory=dict)  # (tenant, server) -> items


def _left(row: list[bytes | None]) -> tuple[str, dict[str, int]] | None:
    """A live batch's tenant and its items left per server; None when it has ended, is gone, or predates the count."""
    status, total, claimed, finished, halt, tenant, per_server = (None if v is None else v.decode() for v in row)
    if status is None or BatchStatus(status) in TERMINAL_BATCH or per_server is None or not total:
        return None
    # a halted batch claims nothing more: only its calls in flight are still to finish
    left = int(claimed or 0) - int(finished or 0) if halt else int(total) - int(finished or 0)
    counts: dict[str, int] = json.loads(per_server)
    share = max(0, left) / int(total)
    return tenant or "", {server: round(n * share) for server, n in counts.items()}


class Backlog:
    """The queued work of the live batches."""

    def __init__(self, redis: Redis, keys: Keys, control: Redis | None = None) -> None:
        self.redis = redis
        self.control = redis if control is None else control
        self.keys = keys

    async def queued(self) -> Queued:
        jobs = await self.control.zrange(self.keys.jobs, 0, _MOST - 1)
        batch_ids = sorted({shards.parse(job.decode())[0] for job in jobs})
        async with self.redis.pipeline(transaction=False) as pipe:
            for batch_id in batch_ids:
                pipe.hmget(self.keys.batch(batch_id), _FIELDS)
            rows = await pipe.execute()
        by_server: dict[str, int] = defaultdict(int)
        by_tenant: dict[tuple[str, str], int] = defaultdict(int)
        for row in rows:
            found = _left(row)
            if found is None:
                continue
            tenant, left = found
            for server, n in left.items():
                by_server[server] += n
                by_tenant[tenant, server] += n
        return Queued(dict(by_server), dict(by_tenant))

    async def owners(self, batch_ids: list[str]) -> dict[str, Owner]:
        """The tenant and priority of each batch that still exists (one pipeline): a worker picks queued jobs
        fairly between tenants with them."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for batch_id in batch_ids:
                pipe.hmget(self.keys.batch(batch_id), ["tenant", "priority"])
            # A batch whose hash cannot be read (a key of another type) is left out, not every tenant's pick.
            rows = await pipe.execute(raise_on_error=False)
        found = {}
        for batch_id, row in zip(batch_ids, rows, strict=True):
            if isinstance(row, Exception):
                continue
            tenant, priority = row
            if tenant is not None:
                found[batch_id] = Owner(tenant.decode(), Priority(priority.decode()) if priority else Priority.normal)
        return found
