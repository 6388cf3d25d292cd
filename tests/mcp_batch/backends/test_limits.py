"""The limiter's Lua on fakeredis (which runs it with lupa) under a controlled clock: exact GCRA arithmetic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import fakeredis
import pytest
from fakeredis.commands_mixins import server_mixin

from mcp_batch.backends.limits import LeaseSemaphore, LocalRateLimiter, RateLimiter
from mcp_batch.backends.servers_file import RateLimit
from mcp_batch.keys import Keys


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(server_mixin, "time", SimpleNamespace(time=clock.time))  # Redis TIME in fakeredis
    return clock


@pytest.fixture
async def fake() -> AsyncIterator[fakeredis.FakeAsyncRedis]:
    client = fakeredis.FakeAsyncRedis()
    yield client
    await client.aclose()


LIMIT = RateLimit(per_second=50, burst=10)


async def test_a_burst_is_admitted_at_once_then_calls_are_spaced(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    limiter = RateLimiter(fake, Keys())
    waits = [(await limiter.reserve("b", LIMIT, 60)).wait for _ in range(13)]
    assert waits[:10] == [0.0] * 10
    assert waits[10:] == pytest.approx([0.02, 0.04, 0.06])


async def test_the_bucket_refills_with_time_up_to_the_burst(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    limiter = RateLimiter(fake, Keys())
    for _ in range(10):
        await limiter.reserve("b", LIMIT, 60)
    clock.now += 60
    waits = [(await limiter.reserve("b", LIMIT, 60)).wait for _ in range(11)]
    assert waits[:10] == [0.0] * 10 and waits[10] == pytest.approx(0.02)


async def test_a_slot_beyond_the_max_wait_is_refused_and_not_booked(
    fake: fakeredis.FakeAsyncRedis, clock: Clock
) -> None:
    limiter = RateLimiter(fake, Keys())
    for _ in range(10):
        await limiter.reserve("b", LIMIT, 60)
    refused = await limiter.reserve("b", LIMIT, 0.01)
    assert not refused.granted and refused.wait == pytest.approx(0.02)
    granted = await limiter.reserve("b", LIMIT, 1)
    assert granted.granted and granted.wait == pytest.approx(0.02)


async def test_per_minute_and_per_second_buckets_both_hold(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    limiter = RateLimiter(fake, Keys())
    limit = RateLimit(per_second=10, per_minute=3, burst=2)
    waits = [(await limiter.reserve("b", limit, 600)).wait for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.0, 20.0, 40.0])


async def test_any_window_admits_at_most_the_rate_plus_the_burst(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    limiter = RateLimiter(fake, Keys())
    admitted = []
    for step in range(600):  # callers arriving in clumps, faster than the limit
        clock.now += 0.003 if step % 7 else 0.2
        reservation = await limiter.reserve("b", LIMIT, 600)
        admitted.append(clock.now + reservation.wait)
    admitted.sort()
    for window, most in ((1.0, 60), (0.1, 15)):
        assert max(sum(1 for t in admitted[i:] if t < start + window) for i, start in enumerate(admitted)) <= most


async def test_a_push_back_holds_every_caller(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    limiter = RateLimiter(fake, Keys())
    await limiter.push_back("b", 2.5)
    assert (await limiter.reserve("b", LIMIT, 60)).wait == pytest.approx(2.5)
    assert (await limiter.reserve("b", None, 60)).wait == pytest.approx(2.5)  # even without a configured limit
    clock.now += 3
    assert (await limiter.reserve("b", None, 60)).wait == 0.0


async def test_tokens_reports_the_current_allowance(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    limiter = RateLimiter(fake, Keys())
    assert await limiter.tokens("b", LIMIT) == pytest.approx(10)
    for _ in range(4):
        await limiter.reserve("b", LIMIT, 60)
    assert await limiter.tokens("b", LIMIT) == pytest.approx(6)


async def test_the_local_limiter_computes_the_same_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr("mcp_batch.backends.limits.time", SimpleNamespace(time=clock.time))
    limiter = LocalRateLimiter()
    waits = [(await limiter.reserve("b", LIMIT, 60)).wait for _ in range(12)]
    assert waits[:10] == [0.0] * 10 and waits[10:] == pytest.approx([0.02, 0.04])


async def test_leases_cap_holders_and_lapse_when_a_holder_dies(fake: fakeredis.FakeAsyncRedis, clock: Clock) -> None:
    semaphore = LeaseSemaphore(fake, Keys())
    assert await semaphore.try_acquire("b", 2, "one", 10) is None
    assert await semaphore.try_acquire("b", 2, "two", 30) is None
    assert await semaphore.try_acquire("b", 2, "three", 10) == pytest.approx(10)
    await semaphore.release("b", "one")
    assert await semaphore.try_acquire("b", 2, "three", 10) is None
    clock.now += 11  # "three" was never released: its holder died
    assert await semaphore.try_acquire("b", 2, "four", 10) is None
    assert await semaphore.try_acquire("b", 2, "five", 10) == pytest.approx(10)  # when "four" lapses
