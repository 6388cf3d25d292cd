"""Assembling the batch document from what the store read: pure functions over the raw Redis replies.

An item's state is derived: a result record means finished; an index below the claim cursor without one means
running; above it pending. Once the batch halts (`halt`: stop, cancel, expire) the items never run take the
matching status, and once it has ended every item without a record has it.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from mcp_batch.models import (
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
    WebhookState,
    WebhookStatus,
)

LIMITS = TypeAdapter(dict[str, BackendLimits])
# What an item that never ran becomes when its batch halts for this reason.
HALTED = {"stop": ItemStatus.skipped, "cancel": ItemStatus.cancelled, "expire": ItemStatus.expired}


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
    ended = status in TERMINAL_BATCH
    stopped_at = int(meta["stopped_at"]) if "stopped_at" in meta else None
    rest = HALTED.get(meta.get("halt", ""))  # the status of items that will not run, once the batch halts
    n = {s: int(meta.get(f"n:{s.value}", 0)) for s in ItemStatus}
    results = []
    for k, raw in enumerate(raw_calls):
        index = offset + k
        item: dict[str, Any] = {"index": index, **spec_fields(raw)}
        if index in records:
            item.update(json.loads(records[index]))
        elif index < claimed and not ended:
            item["status"] = ItemStatus.running
        else:
            item["status"] = rest or ItemStatus.pending
        results.append(ItemResult.model_validate(item))
    unrun = total - finished if ended else total - claimed  # items that will not run (if halted) or wait
    if rest is not None:
        n[rest] += unrun
    counts = Counts(
        total=total,
        succeeded=n[ItemStatus.ok],
        failed=sum(n[s] for s in FAILED_ITEM),
        pending=0 if rest is not None else unrun,
        running=0 if ended else claimed - finished,
        skipped=n[ItemStatus.skipped],
        cancelled=n[ItemStatus.cancelled],
        expired=n[ItemStatus.expired],
    )
    created = float(meta["created_at"])
    started = float(meta["started_at"]) if "started_at" in meta else None
    end = float(meta["finished_at"]) if "finished_at" in meta else None
    retention = int(meta.get("retention", 86_400))
    return BatchDocument(
        id=batch_id,
        status=status,
        ok=ended and counts.succeeded == total,
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
        deadline_at=iso(float(meta["deadline_at"])) if "deadline_at" in meta else None,
        retention_seconds=retention,
        expires_at=iso(end + retention) if end is not None else None,
        created_at=iso(created) or "",
        started_at=iso(started),
        finished_at=iso(end),
        elapsed_seconds=round((end if end is not None else time.time()) - created, 6),
        retry_of=meta.get("retry_of"),
        webhook=_webhook(meta),
    )


def _webhook(meta: dict[str, str]) -> WebhookState | None:
    if "webhook_url" not in meta:
        return None
    status = WebhookStatus(meta.get("webhook_status", WebhookStatus.pending.value))
    return WebhookState(status=status, attempts=int(meta.get("webhook_attempts", 0)))
