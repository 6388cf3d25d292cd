"""Which queued shard jobs a worker starts first when it has free slots: fair between tenants, priority within one.

The queue's scores already take tenants in turns (store/queue.py). Here, among the jobs the worker read from the
queue's head, each tenant's jobs fill that tenant's turns highest priority first (a `high` batch goes ahead of its
own tenant's queued work, never ahead of another tenant's), and a free slot goes to the tenant holding the fewest
of this worker's slots, its oldest turn first. A tenant holds at most `tenant_max_jobs` of the worker's slots (by
default all but one at most), so another tenant's batch always finds one, however long the first tenant's jobs run
(a call waiting on a person's answer included).

A lone queued job on a worker running none starts without reading whose it is: with nothing running and nothing else
queued there is no one to be fair between, and a small batch's start is one round trip shorter. Its tenant is read
with the next pick's, before anything is counted against it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from mcp_batch import shards
from mcp_batch.backends.priority import RANK
from mcp_batch.settings import Settings
from mcp_batch.store.backlog import Backlog, Owner

_NOBODY = Owner("")  # a job whose batch is gone: it starts and ends at once


def tenant_job_slots(settings: Settings) -> int:
    """How many of a worker's job slots one tenant's jobs may hold: `worker_tenant_max_jobs`, or four fifths of the
    slots rounded up but at most all but one, so another tenant can always start (all of them with auth off: there
    is one tenant). A worker of one slot lends it whole: none would run nothing, so there another tenant waits for
    the job in it to end, and only more slots or workers keep a tenant's waiting calls from holding the rest back."""
    slots = settings.worker_max_jobs
    if settings.worker_tenant_max_jobs is not None:
        return min(settings.worker_tenant_max_jobs, slots)
    if settings.auth == "none":
        return slots
    return max(1, min(slots - 1, -(-slots * 4 // 5)))


def fair_order(jobs: Sequence[str], owners: Mapping[str, Owner], held: Counter[str], most: int) -> list[str]:
    """`jobs` (queue order) in the order to start them, without those of tenants already holding `most` slots
    (`held`: slots each tenant's jobs hold on this worker). Pure: the worker's state is its arguments."""
    turns: dict[str, list[int]] = {}
    own: dict[str, list[str]] = {}
    for position, job in enumerate(jobs):
        tenant = owners.get(shards.batch_of(job), _NOBODY).tenant
        turns.setdefault(tenant, []).append(position)
        own.setdefault(tenant, []).append(job)
    for tenant_jobs in own.values():  # stable: within a rank, queue order
        tenant_jobs.sort(key=lambda job: RANK[owners.get(shards.batch_of(job), _NOBODY).priority])
    taken = Counter(held)
    done = dict.fromkeys(own, 0)
    order: list[str] = []
    while True:
        ready = [t for t in own if done[t] < len(own[t]) and (t == "" or taken[t] < most)]
        if not ready:
            return order
        tenant = min(ready, key=lambda t: (taken[t], turns[t][done[t]]))
        order.append(own[tenant][done[tenant]])
        done[tenant] += 1
        taken[tenant] += 1


class FairPick:
    """One worker's picks: whose each running job is, and the order to start queued ones in."""

    def __init__(self, backlog: Backlog, tenant_max_jobs: int) -> None:
        self._backlog = backlog
        self._most = tenant_max_jobs
        self._tenant_of: dict[str, str | None] = {}  # running job -> its tenant (None: not read yet)
        self._owners: dict[str, Owner] | None = {}  # the last read's batches; None when the last pick read none

    async def order(self, jobs: list[str]) -> list[str]:
        """The queued `jobs` in the order this worker should try to start them."""
        if len(jobs) == 1 and not self._tenant_of:  # alone, on a worker running nothing: no one to be fair between
            self._owners = None
            return list(jobs)
        unread = [job for job, tenant in self._tenant_of.items() if tenant is None]
        owners = await self._backlog.owners(sorted({shards.batch_of(job) for job in [*jobs, *unread]}))
        for job in unread:
            self._tenant_of[job] = owners.get(shards.batch_of(job), _NOBODY).tenant
        self._owners = owners
        held = Counter(tenant for tenant in self._tenant_of.values() if tenant is not None)
        return fair_order(jobs, owners, held, self._most)

    def started(self, job: str) -> None:
        owners = self._owners
        self._tenant_of[job] = None if owners is None else owners.get(shards.batch_of(job), _NOBODY).tenant

    def ended(self, job: str) -> None:
        self._tenant_of.pop(job, None)
