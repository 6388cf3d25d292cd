"""How a batch is split into shards: pure arithmetic."""

from __future__ import annotations

from mcp_batch import shards
from mcp_batch.models import Mode


def test_a_batch_gets_a_shard_per_live_worker_within_its_bounds() -> None:
    assert shards.plan(500, 16, Mode.concurrent, False, live_workers=3, most=16, min_items=50) == 3
    assert shards.plan(120, 16, Mode.concurrent, False, live_workers=8, most=16, min_items=50) == 3
    assert shards.plan(500, 2, Mode.concurrent, False, live_workers=8, most=16, min_items=50) == 2
    assert shards.plan(500, 16, Mode.concurrent, False, live_workers=0, most=16, min_items=50) == 1


def test_a_small_serial_or_linked_batch_is_one_shard_whatever_the_workers() -> None:
    """At a ceiling of 1 the submit does not ask how many workers are live."""
    assert shards.ceiling(50, 16, Mode.concurrent, False, most=16, min_items=50) == 1
    assert shards.ceiling(5_000, 16, Mode.serial, False, most=16, min_items=50) == 1
    assert shards.ceiling(5_000, 16, Mode.concurrent, True, most=16, min_items=50) == 1
    assert shards.ceiling(5_000, 1, Mode.concurrent, False, most=16, min_items=50) == 1
    assert shards.ceiling(51, 16, Mode.concurrent, False, most=16, min_items=50) == 2
    for live in (1, 4, 100):
        assert shards.plan(50, 16, Mode.concurrent, False, live, most=16, min_items=50) == 1
