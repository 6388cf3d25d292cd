"""The estimate's arithmetic, over plain data: each limit's time, the largest one named, what is not known."""

from __future__ import annotations

from collections import Counter

import pytest

from mcp_batch.backends.servers_file import HttpBackend
from mcp_batch.contract.estimate import Plan, estimate
from mcp_batch.dry_runs import BoundKind
from mcp_batch.store.backlog import Queued


def backend(**limits: object) -> HttpBackend:
    return HttpBackend.model_validate({"url": "http://127.0.0.1:1/mcp", **limits})


def plan(calls: dict[tuple[str, str], int], lanes: int = 16, share: float | None = None) -> Plan:
    return Plan(Counter(calls), lanes, "t", share)


def test_a_rate_limit_bounds_a_batch_after_its_burst_plus_the_last_calls_latency() -> None:
    found = estimate(
        plan({("a", "x"): 100}),
        {"a": backend(rate_limit={"per_second": 10, "burst": 5})},
        Queued(),
        {("a", "x"): [0.2]},
    )
    assert found.bound is not None and found.bound.kind is BoundKind.rate_limit and found.bound.server == "a"
    assert found.seconds == pytest.approx(95 / 10 + 0.2) and found.complete is True


def test_the_tenants_own_work_queued_ahead_and_its_share_count_and_no_other_tenants() -> None:
    limited = {"a": backend(rate_limit={"per_minute": 600})}
    queued = Queued({"a": 50}, {("t", "a"): 10, ("u", "a"): 40})
    found = estimate(plan({("a", "x"): 10}, share=0.25), limited, queued, {})
    kinds = {b.kind: b.seconds for b in found.bounds}
    assert kinds[BoundKind.rate_limit] == pytest.approx(19 / 10)
    assert kinds[BoundKind.tenant_rate_share] == pytest.approx(19 / 2.5)
    assert found.bound is not None and found.bound.kind is BoundKind.tenant_rate_share
    assert found.complete is False and found.unknown_latency == ["a/x"]
    assert found.backends[0].queued_ahead == 10 and found.backends[0].rate_per_second == 2.5
    alone = estimate(plan({("a", "x"): 10}, share=0.25), limited, Queued({"a": 10}, {("t", "a"): 10}), {})
    assert alone == found  # tenant u's 40 queued calls move nothing tenant t sees


def test_latency_bounds_a_backends_cap_and_the_batchs_lanes() -> None:
    latencies = {("a", "x"): [1.0, 3.0], ("b", "y"): [0.5]}
    found = estimate(
        plan({("a", "x"): 8, ("b", "y"): 8}, lanes=4), {"a": backend(max_concurrency=2)}, Queued(), latencies
    )
    kinds = {b.kind: b.seconds for b in found.bounds}
    assert kinds[BoundKind.backend_concurrency] == pytest.approx(8 * 2.0 / 2)
    assert kinds[BoundKind.max_concurrency] == pytest.approx((8 * 2.0 + 8 * 0.5) / 4)
    assert found.seconds == pytest.approx(8.0) and found.bound is not None and found.bound.server == "a"


def test_with_no_limit_and_no_latency_nothing_is_estimated() -> None:
    found = estimate(plan({("a", "x"): 3}), {"a": backend()}, Queued(), {})
    assert found.seconds is None and found.bound is None and found.unknown_latency == ["a/x"]


def test_the_longest_single_call_bounds_a_batch_whatever_its_lanes() -> None:
    latencies = {("demo", "sleep"): [0.5], ("demo", "echo"): [0.01]}
    found = estimate(plan({("demo", "sleep"): 1, ("demo", "echo"): 4}, lanes=5), {}, Queued(), latencies)
    assert found.bound is not None and found.bound.kind is BoundKind.longest_call and found.bound.server == "demo"
    assert found.seconds == pytest.approx(0.5) and "demo/sleep" in found.bound.explanation


def test_a_serial_batch_takes_the_sum_of_its_calls() -> None:
    latencies = {("demo", "sleep"): [0.5], ("demo", "echo"): [0.01]}
    found = estimate(plan({("demo", "sleep"): 2, ("demo", "echo"): 10}, lanes=1), {}, Queued(), latencies)
    assert found.bound is not None and found.bound.kind is BoundKind.max_concurrency
    assert found.seconds == pytest.approx(2 * 0.5 + 10 * 0.01)
