"""The item record: what a worker stores for one finished item, built here and nowhere else.

A record is a typed dict, not a model: it is built once per item on the worker's hot path, stored as JSON, and read
back by the document's assembly, which adds the call's index, id, server and tool (`ItemResult`). Fields left out
mean "not applicable" (no content for an item that never ran).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict

import orjson

from mcp_batch.models import ItemStatus


class ErrorInfo(TypedDict):
    """Why an item did not succeed; `details` never holds argument values."""

    code: str
    message: str
    type: str
    details: dict[str, Any] | None


class ItemRecord(TypedDict):
    """One finished item, as stored (`ItemResult` less the call's own fields)."""

    status: str
    started_at: str | None
    finished_at: str | None
    worker: NotRequired[str]
    error: NotRequired[ErrorInfo | None]
    content: NotRequired[list[dict[str, Any]]]
    structured_content: NotRequired[Any]
    meta: NotRequired[dict[str, Any]]
    next_cursor: NotRequired[str]
    is_error: NotRequired[bool]
    elapsed_seconds: NotRequired[float]
    attempts: NotRequired[int]
    rate_wait_seconds: NotRequired[float]
    connect_seconds: NotRequired[float]
    recovered: NotRequired[bool]
    queued_seconds: NotRequired[float]
    stored_truncated: NotRequired[bool]
    stored_truncated_bytes: NotRequired[int]
    seq: NotRequired[int]  # added by the store when it records the item (its place in finish order)


TOOL_MESSAGE_CHARS = 500  # of a tool's own words in `error.message`: what failed, in brief (the content has it all)
_MASKED_CHARS = 4  # argument strings at least this long are masked in a tool's message (shorter ones are words)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if len(value) >= _MASKED_CHARS else []
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def tool_message(content: list[dict[str, Any]], arguments: dict[str, Any]) -> str | None:
    """A tool's error in its own words: its first text block, at most TOOL_MESSAGE_CHARS characters, any argument
    value it repeats masked as `***` (an error never echoes an argument; the content keeps what the tool said)."""
    for block in content:
        text = block.get("text") if block.get("type") == "text" else None
        if isinstance(text, str) and text.strip():
            text = text.strip()
            for value in sorted(_strings(arguments), key=len, reverse=True):
                text = text.replace(value, "***")
            return text if len(text) <= TOOL_MESSAGE_CHARS else text[: TOOL_MESSAGE_CHARS - 1] + "…"
    return None


def iso(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 in UTC (None stays None)."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def error_info(code: str, message: str, type_: str, **details: Any) -> ErrorInfo:
    """An item's error; `details` are extra facts (never argument values), None when there are none."""
    return {"code": code, "message": message, "type": type_, "details": details or None}


def record(
    status: ItemStatus,
    *,
    started: float | None = None,
    finished: float | None = None,
    worker: str | None = None,
    queued_seconds: float | None = None,
    error: ErrorInfo | None = None,
    content: list[dict[str, Any]] | None = None,
    structured_content: Any = None,
    meta: dict[str, Any] | None = None,
    next_cursor: str | None = None,
    is_error: bool | None = None,
    elapsed_seconds: float | None = None,
    attempts: int | None = None,
    rate_wait_seconds: float | None = None,
    connect_seconds: float | None = None,
    recovered: bool = False,
) -> ItemRecord:
    """The record of an item that ended with `status`, complete as it returns. `started`/`finished` (epoch seconds)
    default to now: an item that never reached its backend started and finished at once. Fields left None are left
    out (`structured_content` goes with `content`)."""
    now = time.time()
    built: ItemRecord = {
        "status": status.value,
        "started_at": iso(now if started is None else started),
        "finished_at": iso(now if finished is None else finished),
    }
    # Field by field, in the stored order: this runs once per item on the worker's hot path.
    if worker is not None:
        built["worker"] = worker
    if queued_seconds is not None:
        built["queued_seconds"] = queued_seconds
    if error is not None:
        built["error"] = error
    if content is not None:
        built["content"] = content
        built["structured_content"] = structured_content  # with content, even null
    elif structured_content is not None:
        built["structured_content"] = structured_content
    if meta is not None:
        built["meta"] = meta
    if next_cursor is not None:
        built["next_cursor"] = next_cursor
    if is_error is not None:
        built["is_error"] = is_error
    if elapsed_seconds is not None:
        built["elapsed_seconds"] = elapsed_seconds
    if attempts is not None:
        built["attempts"] = attempts
    if rate_wait_seconds is not None:
        built["rate_wait_seconds"] = rate_wait_seconds
    if connect_seconds is not None:
        built["connect_seconds"] = connect_seconds
    if recovered:
        built["recovered"] = True
    return built


Builder = Callable[..., ItemRecord]  # `record`, with what every record of one item carries given already


def builder(worker: str, queued_seconds: float) -> Builder:
    """`record` for one item: every record it may end with names its worker and the time it waited in the queue."""
    return functools.partial(record, worker=worker, queued_seconds=queued_seconds)


def dump(item: ItemRecord) -> bytes:
    """The record as stored: compact JSON in UTF-8."""
    try:
        return orjson.dumps(item)
    except TypeError:  # what orjson refuses and json takes: an integer past 64 bits from a tool
        return json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode()
