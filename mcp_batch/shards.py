"""How a batch is split across workers: pure arithmetic, and the job ids that carry it.

A concurrent batch becomes up to one shard (an arq job) per live worker; every shard claims items from the same
cursor, so they share the work however fast each one goes. The batch's max_concurrency is divided among the
shards, so it holds across all workers together. A serial batch, or one whose calls reference each other, is one
shard: its order and its waits stay in one place.
"""

from __future__ import annotations

from mcp_batch.models import Mode


def plan(total: int, concurrency: int, mode: Mode, linked: bool, live_workers: int, most: int, min_items: int) -> int:
    """How many shards a batch gets."""
    return max(1, min(live_workers, ceiling(total, concurrency, mode, linked, most, min_items)))


def ceiling(total: int, concurrency: int, mode: Mode, linked: bool, most: int, min_items: int) -> int:
    """The most shards a batch could get, however many workers are live: at 1, their number need not be asked."""
    if mode is Mode.serial or linked:
        return 1
    return max(1, min(most, concurrency, -(-total // min_items)))


def lanes(concurrency: int, shards: int, shard: int) -> int:
    """Lanes (calls in flight) of one shard: the batch's max_concurrency divided as evenly as it goes."""
    return concurrency // shards + (1 if shard < concurrency % shards else 0)


def job_id(batch_id: str, shard: int, generation: int = 0) -> str:
    """A shard job's id; a job taken over (its worker stopped) is replaced by the next generation."""
    return f"{batch_id}:{shard}:{generation}"


def parse(job: str) -> tuple[str, int, int]:
    """batch id, shard, generation of a shard job id."""
    batch_id, shard, generation = job.split(":")
    return batch_id, int(shard), int(generation)


def batch_of(job: str) -> str:
    return job.split(":", 1)[0]
