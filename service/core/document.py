"""Assembling the batch document from what the store read: pure functions over the raw Redis replies.

An item's state is derived: a result record means finished; an index below the claim cursor without one means
running; above it pending, or skipped once the batch has stopped.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from .models import (
    FAILED_ITEM,
    TERMINAL_BATCH,
    BackendLimits,
    BatchDocument,
    BatchStatus,
    Counts,
    ItemResult,
    ItemStatus,
    Mode,
    OnError,
)

LIMITS = TypeAdapter(dict[str, BackendLimits])


def iso(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 in UTC (None stays None)."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def spec_fields(raw: bytes) -> dict[str, Any]:
    spec = json.loads(raw)
    return {"id": spec["id"], "server": spec["server"], "tool": spec["tool"]}


def render(
    batch_id: str,
    meta: dict[str, str],
    offset: int,
    raw_calls: list[bytes],
    records: dict[int, bytes],
    raw_failed: list[tuple[bytes, float]],
) -> BatchDocument:
    total, claimed, finished = int(meta["total"]), int(meta["claimed"]), int(meta["finished"])
    status = BatchStatus(meta["status"])
    stopped_at = int(meta["stopped_at"]) if "stopped_at" in meta else None
    n = {s: int(meta.get(f"n:{s.value}", 0)) for s in ItemStatus}
    results = []
    for k, raw in enumerate(raw_calls):
        index = offset + k
        item: dict[str, Any] = {"index": index, **spec_fields(raw)}
        if index in records:
            item.update(json.loads(records[index]))
        elif index < claimed:
            item["status"] = ItemStatus.running
        elif stopped_at is not None:
            item["status"] = ItemStatus.skipped
        else:
            item["status"] = ItemStatus.pending
        results.append(ItemResult.model_validate(item))
    never_started = total - claimed
    counts = Counts(
        total=total,
        succeeded=n[ItemStatus.ok],
        failed=sum(n[s] for s in FAILED_ITEM),
        pending=0 if stopped_at is not None else never_started,
        running=claimed - finished,
        skipped=n[ItemStatus.skipped] + (never_started if stopped_at is not None else 0),
    )
    created = float(meta["created_at"])
    started = float(meta["started_at"]) if "started_at" in meta else None
    ended = float(meta["finished_at"]) if "finished_at" in meta else None
    return BatchDocument(
        id=batch_id,
        status=status,
        ok=status in TERMINAL_BATCH and counts.succeeded == total,
        mode=Mode(meta["mode"]),
        on_error=OnError(meta["on_error"]),
        max_concurrency=int(meta["max_concurrency"]),
        counts=counts,
        failed_ids=[member.decode() for member, _ in raw_failed],
        failed_indexes=[int(score) for _, score in raw_failed],
        stopped_at=stopped_at,
        results=results,
        results_offset=offset,
        limits=LIMITS.validate_json(meta.get("limits", "{}")),
        read_only=meta.get("read_only", "1") == "1",
        response_max_bytes=int(meta.get("response_max_bytes", 300_000)),
        next_offset=offset + len(results) if offset + len(results) < total else None,
        created_at=iso(created) or "",
        started_at=iso(started),
        finished_at=iso(ended),
        elapsed_seconds=round((ended if ended is not None else time.time()) - created, 6),
        retry_of=meta.get("retry_of"),
    )
