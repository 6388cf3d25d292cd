"""Priority's Lua on the real Redis: a rank below one that runs waits for its turn at its minimum share; the same
rank, or none running, is clear; a job that ends or lapses lets the ranks below go."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from mcp_batch.backends.priority import MIN_SHARE, Priorities
from mcp_batch.backends.servers_file import RateLimit
from mcp_batch.keys import Keys
from mcp_batch.models import Priority
from tests.support import eventually

LIMIT = RateLimit(per_second=10)  # a tenth of it: one lower-rank call every second while a higher rank runs


@pytest.fixture
def priorities(redis: aioredis.Redis) -> Priorities:
    return Priorities(redis, Keys())


async def test_nothing_is_held_back_while_no_higher_rank_runs(priorities: Priorities) -> None:
    assert (await priorities.turn("b", "t", Priority.low, LIMIT, 2.0)).clear
    await priorities.hold(["b"], "t", Priority.low, "job-low", 30)  # nothing yields to low: nothing is held
    await priorities.hold(["b"], "t", Priority.normal, "job-normal", 30)
    assert (await priorities.turn("b", "t", Priority.normal, LIMIT, 2.0)).clear  # the same rank does not yield
    assert (await priorities.turn("b", "other", Priority.low, LIMIT, 2.0)).clear  # nor another tenant's
    assert (await priorities.turn("c", "t", Priority.low, LIMIT, 2.0)).clear  # nor on another backend


async def test_a_lower_rank_takes_turns_at_its_minimum_share_while_a_higher_one_runs(priorities: Priorities) -> None:
    await priorities.hold(["b"], "t", Priority.high, "job-high", 30)
    first = await priorities.turn("b", "t", Priority.normal, LIMIT, 1.5)
    second = await priorities.turn("b", "t", Priority.normal, LIMIT, 1.5)
    third = await priorities.turn("b", "t", Priority.normal, LIMIT, 1.5)
    assert first.booked and first.wait == 0 and not first.clear
    assert second.booked and second.wait == pytest.approx(1 / (10 * MIN_SHARE), abs=0.05)
    assert not third.booked and not third.clear and third.wait > 1.5  # too far to book: asked again later
    assert (await priorities.turn("b", "t", Priority.low, LIMIT, 1.5)).booked  # each rank has its own share
    await priorities.release(["b"], "t", Priority.high, "job-high")
    assert (await priorities.turn("b", "t", Priority.normal, LIMIT, 1.5)).clear


async def test_a_job_that_stops_renewing_lapses(priorities: Priorities) -> None:
    await priorities.hold(["b"], "t", Priority.high, "job-gone", 0.2)
    assert not (await priorities.turn("b", "t", Priority.low, LIMIT, 2.0)).clear

    async def clear() -> bool:
        return (await priorities.turn("b", "t", Priority.low, LIMIT, 2.0)).clear

    await eventually(clear, what="the lapsed job let the low rank go", timeout=5)
