"""The order a worker starts queued jobs in: without Redis, tenants take turns, a tenant's `high` batch goes ahead of
its own queued work only, a free slot goes to the tenant holding the fewest, and no tenant holds more than its most;
with the real service and one job slot, another tenant's `high` batches never start before an earlier batch; a lone
job on an idle worker starts without reading whose it is, and counts against its tenant from the next pick."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.models import Priority
from mcp_batch.settings import Settings
from mcp_batch.store.backlog import Backlog, Owner
from mcp_batch.tenants import hash_key
from tests.support import eventually, finished, running_service, submit
from worker.fair_pick import FairPick, fair_order, tenant_job_slots

A, B = "alpha", "beta"


def job(batch: str) -> str:
    return f"{batch}:0:0"


def test_a_high_batch_goes_ahead_of_its_tenants_queued_work_never_another_tenants() -> None:
    owners = {
        "b1": Owner(B),
        "a2": Owner(A),
        "a3": Owner(A, Priority.high),
        "a4": Owner(A, Priority.high),
        "a5": Owner(A, Priority.low),
    }
    queued = [job(b) for b in ("b1", "a2", "a3", "a4", "a5")]
    assert fair_order(queued, owners, Counter({A: 1}), 50) == [job(b) for b in ("b1", "a3", "a4", "a2", "a5")]


def test_a_free_slot_goes_to_the_tenant_holding_the_fewest() -> None:
    owners = {f"a{n}": Owner(A, Priority.high) for n in range(4)} | {"b0": Owner(B), "b1": Owner(B)}
    queued = [job(b) for b in ("a0", "a1", "a2", "a3", "b0", "b1")]
    order = fair_order(queued, owners, Counter({A: 3}), 50)
    assert order[:3] == [job("b0"), job("b1"), job("a0")]  # beta holds none of the slots, alpha three


def test_no_tenant_holds_more_than_its_most_and_a_vanished_batch_is_not_held_back() -> None:
    owners = {f"a{n}": Owner(A) for n in range(4)}
    queued = [job(b) for b in ("a0", "a1", "gone", "a2", "a3")]
    assert fair_order(queued, owners, Counter({A: 2}), 3) == [job("gone"), job("a0")]
    assert fair_order(queued, owners, Counter({A: 3}), 3) == [job("gone")]


ALPHA, BETA = "mcpb_alpha-key", "mcpb_beta-key"
SLEEP = "sleep"


def sleeping(seconds: float) -> list[dict[str, Any]]:
    return [{"server": "demo_http", "tool": SLEEP, "arguments": {"seconds": seconds}}]


@pytest.fixture
def one_slot(settings: Settings, tmp_path: Path) -> Settings:
    keys = [{"sha256": hash_key(key), "tenant": tenant, "write": True} for key, tenant in [(ALPHA, A), (BETA, B)]]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    update = {"auth": "keys", "keys": tmp_path / "keys.json", "worker_max_jobs": 1}
    return settings.model_copy(update=update)


@asynccontextmanager
async def two_tenants(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with (
        running_service(settings) as service,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {ALPHA}"}) as alpha,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {BETA}"}) as beta,
    ):
        yield alpha, beta


async def running(client: httpx.AsyncClient, batch_id: str) -> bool:
    document = (await client.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()
    return bool(document["started_at"])


@pytest.mark.timeout(60)
async def test_another_tenants_high_batches_do_not_start_before_an_earlier_batch(one_slot: Settings) -> None:
    """The issue's scenario: one job slot; alpha's 4 s batch runs, beta queues one call, then alpha four `high`
    batches: beta's starts before every one of them."""
    async with two_tenants(one_slot) as (alpha, beta):
        long = await submit(alpha, sleeping(4))
        await eventually(lambda: running(alpha, long["id"]), what="alpha's long batch running")
        theirs = await submit(beta, sleeping(0))
        high = [await submit(alpha, sleeping(0), priority="high") for _ in range(4)]
        beta_start = (await finished(beta, theirs["id"]))["started_at"]
        high_starts = [(await finished(alpha, batch["id"]))["started_at"] for batch in high]
    assert all(beta_start < start for start in high_starts), (beta_start, high_starts)


@pytest.mark.timeout(90)
async def test_a_steady_stream_of_one_tenants_high_batches_takes_turns_with_anothers_normal_ones(
    one_slot: Settings,
) -> None:
    async with two_tenants(one_slot) as (alpha, beta):
        stream: list[str] = []

        async def alpha_streams() -> None:
            for _ in range(12):
                stream.append((await submit(alpha, sleeping(0.3), priority="high"))["id"])
                await asyncio.sleep(0.2)  # a steady stream: a new high batch faster than one runs

        streaming = asyncio.create_task(alpha_streams())
        await eventually(lambda: len(stream) >= 3, what="alpha's stream under way")
        theirs = [(await submit(beta, sleeping(0.3)))["id"] for _ in range(3)]
        await streaming
        beta_starts = sorted([(await finished(beta, batch))["started_at"] for batch in theirs])
        alpha_starts = sorted([(await finished(alpha, batch))["started_at"] for batch in stream])
    # Beta's three run in turns with alpha's: by beta's last start, alpha has started at most half its stream.
    assert sum(start < beta_starts[-1] for start in alpha_starts) <= 6, (beta_starts, alpha_starts)
    assert beta_starts[-1] < alpha_starts[-1]


def test_a_tenant_holds_four_fifths_of_a_workers_slots_but_never_the_last_by_default_and_all_with_auth_off(
    settings: Settings,
) -> None:
    keyed = settings.model_copy(update={"auth": "keys"})
    slots = [tenant_job_slots(keyed.model_copy(update={"worker_max_jobs": n})) for n in (1, 2, 3, 5, 50)]
    assert slots == [1, 1, 2, 4, 40]  # one slot is lent whole: none would run nothing
    assert tenant_job_slots(keyed.model_copy(update={"worker_max_jobs": 50, "worker_tenant_max_jobs": 10})) == 10
    assert tenant_job_slots(settings.model_copy(update={"worker_max_jobs": 50})) == 50  # auth off: one tenant


@pytest.mark.timeout(60)
async def test_with_the_defaults_one_tenants_slow_calls_do_not_keep_anothers_one_call_batch_queued(
    one_slot: Settings,
) -> None:
    three_slots = one_slot.model_copy(update={"worker_max_jobs": 3})  # and no MCP_BATCH_WORKER_TENANT_MAX_JOBS
    async with two_tenants(three_slots) as (alpha, beta):
        slow = [(await submit(alpha, sleeping(60)))["id"] for _ in range(3)]

        async def started() -> int:
            return sum([await running(alpha, batch_id) for batch_id in slow])

        await eventually(lambda: started_at_least(started, 2), what="two of alpha's slow batches running")
        theirs = await finished(beta, (await submit(beta, sleeping(0)))["id"], timeout=30)
        assert theirs["status"] == "completed"
        assert await started() == 2  # alpha's third still waits: beta's took the slot alpha may not hold
        for batch_id in slow:
            assert (await alpha.post(f"/v1/batches/{batch_id}/cancel")).status_code == 200


async def started_at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


class CountedBacklog(Backlog):
    """The store's backlog, noting each read of batches' owners."""

    def __init__(self, redis: aioredis.Redis, settings: Settings) -> None:
        super().__init__(redis, settings.key_names)
        self.reads: list[list[str]] = []

    async def owners(self, batch_ids: list[str]) -> dict[str, Owner]:
        self.reads.append(batch_ids)
        return await super().owners(batch_ids)


async def test_a_lone_job_on_an_idle_worker_starts_unread_and_its_tenant_counts_from_the_next_pick(
    redis: aioredis.Redis, settings: Settings
) -> None:
    for batch, tenant in (("b1", A), ("b2", A), ("b3", B)):
        await redis.hset(settings.key_names.batch(batch), mapping={"tenant": tenant, "priority": "normal"})
    backlog = CountedBacklog(redis, settings)
    pick = FairPick(backlog, tenant_max_jobs=1)
    assert await pick.order([job("b1")]) == [job("b1")]
    assert backlog.reads == []
    pick.started(job("b1"))
    # The next pick reads the running job's tenant with the queued ones': alpha holds its one slot, beta starts.
    assert await pick.order([job("b2"), job("b3")]) == [job("b3")]
    assert backlog.reads == [["b1", "b2", "b3"]]
    pick.started(job("b3"))
    pick.ended(job("b1"))
    assert await pick.order([job("b2")]) == [job("b2")]  # not alone: beta's job runs, so whose it is was read
    assert backlog.reads[-1] == ["b2"]
    pick.ended(job("b3"))
    assert await pick.order([job("b2")]) == [job("b2")]
    assert len(backlog.reads) == 2
