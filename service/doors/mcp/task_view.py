"""A batch document seen as an MCP task (SEP-2663): its status, progress message, times and time to live.

Pure functions over the document. Both revisions' field names are sent: `ttlMs`/`pollIntervalMs` (the 2026-07-28
revision) and `ttlSeconds`/`pollIntervalMilliseconds` (the SEP's text); a result admits extra keys, so a client
of either validates it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from mcp_batch.contract.running import in_words
from mcp_batch.item_progress import ItemProgress
from mcp_batch.models import BatchDocument, BatchStatus
from mcp_batch.questions import InputRequest

_MOST_SHOWN = 3  # running items whose progress a status message spells out

# Queued, running and cancelling batches are all at work; an expired batch has its result (its unfinished items
# say `expired`), as a tool that returned would: a task `failed` only for a JSON-RPC error, which a batch never is.
_STATUS = {
    BatchStatus.queued: "working",
    BatchStatus.running: "working",
    BatchStatus.cancelling: "working",
    BatchStatus.completed: "completed",
    BatchStatus.expired: "completed",
    BatchStatus.cancelled: "cancelled",
}


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def status_message(document: BatchDocument, running: Sequence[tuple[str, ItemProgress]] = ()) -> str:
    """Progress in words: "412 of 1,000 calls finished, 3 failed" (then skipped, cancelled, expired, when any), and
    while it runs, what its running items' backends last reported (`running`: item id, progress)."""
    counts = document.counts
    finished = counts.total - counts.pending - counts.running - counts.input_required
    progress = f"{finished:,} of {counts.total:,} calls finished"
    if counts.input_required:
        progress += f", {counts.input_required:,} waiting for an answer"
    others = [(counts.failed, "failed"), (counts.skipped, "skipped"), (counts.cancelled, "cancelled")]
    for count, what in [*others, (counts.expired, "expired")]:
        if count:
            progress += f", {count:,} {what}"
    if document.status is BatchStatus.cancelled:
        return f"cancelled: {progress}; get_batch has them"
    if document.status is BatchStatus.cancelling:
        return f"cancelling: {progress}"
    if document.status is BatchStatus.expired:
        return f"expired at its deadline: {progress}"
    if running and document.status is BatchStatus.running:
        shown = "; ".join(in_words(item_id, found) for item_id, found in running[:_MOST_SHOWN])
        more = f"; {len(running) - _MOST_SHOWN:,} more running" if len(running) > _MOST_SHOWN else ""
        return f"{progress}; {shown}{more}"
    return progress


def ttl_ms(document: BatchDocument, now: float | None = None) -> int:
    """From creation until the batch may be deleted. Exact once it has ended; while it runs, a lower bound (it is
    never deleted while it runs, and is kept `retention_seconds` after it ends)."""
    created = _seconds(document.created_at)
    if document.expires_at is not None:
        return max(0, round((_seconds(document.expires_at) - created) * 1000))
    elapsed = (time.time() if now is None else now) - created
    return max(0, round((elapsed + document.retention_seconds) * 1000))


def task_view(
    document: BatchDocument, poll_ms: int, running: Sequence[tuple[str, ItemProgress]] = ()
) -> dict[str, Any]:
    """The Task fields of the batch (a DetailedTask without its `result`)."""
    ttl = ttl_ms(document)
    return {
        "taskId": document.id,
        "status": _STATUS[document.status],
        "statusMessage": status_message(document, running),
        "createdAt": document.created_at,
        "lastUpdatedAt": document.finished_at or document.started_at or document.created_at,
        "ttlMs": ttl,
        "pollIntervalMs": poll_ms,
        "ttlSeconds": ttl // 1000,
        "pollIntervalMilliseconds": poll_ms,
    }


def asking_view(waiting: dict[int, tuple[str, InputRequest]]) -> dict[str, Any]:
    """The fields of a task whose items wait for answers: `input_required` and each question as an InputRequest
    ({method, params}), keyed by the question's id (the key its answer comes back under in tasks/update)."""
    if not waiting:
        return {}
    requests = {question.id: {"method": question.method, "params": question.params} for _, question in waiting.values()}
    return {"status": "input_required", "inputRequests": requests}
