"""A cluster failover under a running batch of writes: 3 masters with a replica each (real processes on loopback,
node timeout 1 s); the master holding the batch's slot is killed with SIGKILL in the middle of 600 write calls sent by
two worker processes. The wait before each write (WAIT on the slot's master) keeps every claim a write was sent
under, so the promoted replica has it and no write is sent twice; the API answers 503 only while the slot has no
master, and the workers store results again within seconds of the promotion, as the API answers again.

The lease (10 s, renewed every 3.3 s and retried within half a second of a failed renewal) outlasts the failover, so
the workers ride it out holding their jobs, as a production lease should (docs/operations.md, "Past one Redis"). One
engine's run, the cluster's start included, took 15-29 s on the loaded 2-core VM (most of it the two worker processes
starting); it prints the 503 window and when the workers stored results again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_ITEM
from mcp_batch.settings import Settings
from tests.redis_cluster import ClusterServers
from tests.redis_server import ENGINES
from tests.support import (
    HttpBackendProcess,
    all_results,
    call_backend,
    counted_servers,  # noqa: F401 - the `servers` fixture of this module
    eventually,
    finished,
    live_workers,
    running_api,
    submit,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

CALLS = 600


@pytest.fixture(scope="module", params=ENGINES)
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    servers = ClusterServers(tmp_path_factory.mktemp("failover"), masters=3, replicas=1, engine=request.param)
    servers.start()
    yield servers
    servers.stop()


def writes(n: int) -> list[dict[str, Any]]:
    call = {"server": "counted", "tool": "tally_write"}
    return [{"id": f"w{i}", **call, "arguments": {"key": f"w{i}", "seconds": 0.01}} for i in range(n)]


async def test_a_killed_master_under_600_writes_repeats_none_and_the_batch_completes(
    settings: Settings,
    cluster: ClusterServers,
    redis: aioredis.Redis,
    fresh_backend: HttpBackendProcess,
    tmp_path: Path,
) -> None:
    on_cluster = settings.model_copy(
        update={"data_redis_url": cluster.url, "lease_seconds": 10.0, "sweep_seconds": 0.5, "replica_wait_seconds": 2.0}
    )
    unavailable: list[float] = []  # seconds after the kill of each 503
    resumed = None  # seconds after the kill when a worker stored a result again, once the API answered again
    async with running_api(on_cluster) as base_url, httpx.AsyncClient(base_url=base_url, timeout=30) as api:
        with worker_processes(on_cluster, 2, tmp_path):
            await live_workers(redis, 2)
            batch_id = (await submit(api, writes(CALLS), max_concurrency=16, read_only=False))["id"]
            master = cluster.master_of(Keys().batch(batch_id))

            async def some_done() -> bool:
                document = (await api.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()
                return bool(document["counts"]["succeeded"] >= 100)

            await eventually(some_done, what="100 writes finished")
            master.kill()
            killed = time.monotonic()
            first_after: int | None = None  # succeeded, as the API's first answer after the 503s read it
            async with asyncio.timeout(90):
                while True:  # the API's answers while the slot has no master, and after
                    answer = await api.get(f"/v1/batches/{batch_id}", params={"limit": 0})
                    if answer.status_code == 503:
                        unavailable.append(time.monotonic() - killed)
                    else:
                        assert answer.status_code == 200, answer.text
                        document = answer.json()
                        succeeded = document["counts"]["succeeded"]
                        if unavailable and first_after is None:
                            first_after = succeeded
                        elif first_after is not None and resumed is None and succeeded > first_after:
                            resumed = time.monotonic() - killed
                        if document["status"] == "completed":
                            break
                    await asyncio.sleep(0.05)  # sampling the API's answers: how long it answers 503, and when 200
            done = time.monotonic() - killed
            document = await finished(api, batch_id, timeout=30)
            items = await all_results(api, batch_id)
    tallies = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert document["status"] == "completed" and len(items) == CALLS
    assert all(item["status"] in {s.value for s in TERMINAL_ITEM} for item in items)
    assert max(tallies.values()) == 1, "a write was sent twice"
    for item in items:  # ok: sent once; otherwise (in flight at the kill: its wait fell short, or interrupted) at most
        assert tallies.get(item["id"], 0) == 1 if item["status"] == "ok" else tallies.get(item["id"], 0) <= 1, item
    assert unavailable, "the API never saw the slot without a master"
    window = unavailable[-1] - unavailable[0]
    assert window < 20, unavailable  # the node timeout is 1 s: a replica is promoted within seconds
    assert resumed is not None and resumed - unavailable[-1] < 10, (resumed, unavailable[-1])  # as fast as the API
    others = sorted({item["status"] for item in items} - {"ok"})
    print(
        f"{cluster.engine}: 503 for {window:.2f} s ({len(unavailable)} answers, the last {unavailable[-1]:.2f} s after "
        f"the kill); workers storing again {resumed:.2f} s after it; batch done {done:.2f} s after it; not ok: {others}"
    )
