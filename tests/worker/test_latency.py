"""The worker's latency sample reaches Redis within a second of a call's end, also when no call follows it, and at
most once a second (a real Redis)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from redis import asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.records import ItemRecord
from mcp_batch.store.latency import Latencies
from tests.support import eventually
from worker.latency import LatencySampler


def ended(seconds: float) -> ItemRecord:
    return cast(ItemRecord, {"elapsed_seconds": seconds, "attempts": 1})


async def test_the_last_calls_of_a_quiet_worker_reach_the_sample_within_a_second(redis: aioredis.Redis) -> None:
    latencies = Latencies(redis, Keys())
    sampler = LatencySampler(latencies, every=2)
    sampler.note("demo", "echo", "default", ended(0.01))

    async def first() -> bool:
        return (await latencies.recent("default", [("demo", "echo")]))[("demo", "echo")] == [0.01]

    await eventually(first, what="the first sample", timeout=5)
    sampler.note("demo", "sleep", "default", ended(0.5))  # no call after it: written when its second is up

    async def second() -> bool:
        return bool((await latencies.recent("default", [("demo", "sleep")]))[("demo", "sleep")])

    assert not await second()  # not at once: the last write was less than `every` ago
    await eventually(second, what="the quiet worker's last sample", timeout=5)
    await sampler.close()


async def test_closing_writes_what_waits_at_once(redis: aioredis.Redis) -> None:
    latencies = Latencies(redis, Keys())
    sampler = LatencySampler(latencies, every=60)
    sampler.note("demo", "echo", "default", ended(0.01))
    sampler.note("demo", "echo", "default", ended(0.02))
    async with asyncio.timeout(5):
        await sampler.close()
    found = (await latencies.recent("default", [("demo", "echo")]))[("demo", "echo")]
    assert sorted(found) == pytest.approx([0.01, 0.02])
