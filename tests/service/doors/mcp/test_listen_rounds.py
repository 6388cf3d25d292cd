"""The reads listens share, without Redis: a task's view is read once per round however many listens ask, each
tenant's apart, afresh when asked, and a failed read is no one's view."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from service.doors.mcp.listen_rounds import Rounds


async def test_many_listens_of_a_task_share_one_read_per_round_and_tenants_never_share() -> None:
    reads: list[str] = []

    def reader(tenant: str) -> Callable[[], Awaitable[str]]:
        async def read() -> str:
            reads.append(tenant)
            await asyncio.sleep(0)
            return f"view for {tenant}"

        return read

    rounds: Rounds[str] = Rounds(60)
    views = await asyncio.gather(*(rounds.view("alpha", "t1", reader("alpha")) for _ in range(200)))
    assert set(views) == {"view for alpha"} and reads == ["alpha"]
    assert await rounds.view("beta", "t1", reader("beta")) == "view for beta"
    assert await rounds.view("alpha", "t1", reader("alpha"), fresh=True) == "view for alpha"
    assert reads == ["alpha", "beta", "alpha"]
    later: Rounds[str] = Rounds(0)  # a round over at once: every ask reads
    await later.view("alpha", "t1", reader("alpha"))
    await later.view("alpha", "t1", reader("alpha"))
    assert reads.count("alpha") == 4


async def test_a_failed_read_is_raised_to_each_asker_and_not_kept() -> None:
    calls = 0

    async def failing() -> str:
        nonlocal calls
        calls += 1
        raise ConnectionError("storage down")

    rounds: Rounds[str] = Rounds(60)
    for _ in range(2):
        with pytest.raises(ConnectionError):
            await rounds.view("alpha", "t1", failing)
    assert calls == 2
