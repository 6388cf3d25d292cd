"""A shard job's lease renewal (worker/tasks.py): one that fails (Redis unreachable, a cluster failover under way) is
tried again within half a second, not a renew period later, so a job rides out a short data-plane outage holding
its lease instead of leaving it to other workers' sweeps."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import cast

from redis.exceptions import ConnectionError

from mcp_batch.store import Store
from worker.tasks import _renew, _Shard

EVERY = 2.0  # the renew period here: the retry must come well before another period


async def test_a_failed_renewal_is_tried_again_within_half_a_second_then_every_period() -> None:
    calls: list[float] = []
    third = asyncio.Event()

    class Leases:
        async def renew(self, batch_id: str, job: str) -> bool:
            calls.append(time.monotonic())
            if len(calls) == 1:
                raise ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused.")
            if len(calls) == 3:
                third.set()
            return True

    run = SimpleNamespace(lost=False)
    renewing = asyncio.create_task(
        _renew(cast(Store, SimpleNamespace(leases=Leases())), "b", "b:0:0", EVERY, cast(_Shard, run))
    )
    try:
        await asyncio.wait_for(third.wait(), 3 * EVERY + 5)
    finally:
        renewing.cancel()
    failed, retried, renewed = calls
    assert retried - failed < 1.0, "the retry waited for the next period"
    assert renewed - retried >= EVERY * 0.9, "once renewed, the period is back"
    assert run.lost is False
