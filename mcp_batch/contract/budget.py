"""Bounding a response by bytes: pure functions over plain data, tested without Redis.

Stored items are bounded too: `cap_stored` cuts a result record over the per-item storage cap before it is written,
and that cut is final (`stored_truncated`).

A document's `results` share `response_max_bytes` equally (never less than MIN_SHARE per item); an item over its
share is shrunk deterministically — its content replaced by a note, its structured content dropped — and marked
`truncated` with the bytes removed. The stored item stays whole: GET .../items/{id} pages through it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar, cast

MIN_SHARE = 1024
_Record = TypeVar("_Record", bound=Mapping[str, object])  # a stored item record (records.ItemRecord)


def size(value: Any) -> int:
    """Bytes of `value` as the API serializes it (compact JSON, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def share(budget: int, count: int) -> int:
    """Each item's equal share of the budget (less the list's brackets and commas)."""
    return max(MIN_SHARE, (budget - 2) // max(count, 1) - 1)


def most_items(budget: int) -> int:
    """How many items one response can hold with every item at its minimum share."""
    return max(1, (budget - 2) // (MIN_SHARE + 1))


def shrink(item: dict[str, Any], limit: int) -> dict[str, Any]:
    """The item itself if it fits `limit` bytes, else a copy cut down to fit (as far as its names allow)."""
    before = size(item)
    if before <= limit:
        return item
    small = dict(item)
    small["content"] = [{"type": "text", "text": f"[{before} bytes: fetch this item by id for the whole of it]"}]
    small["structured_content"] = None
    small["truncated"] = True
    if size(small) > limit and small.get("error"):
        small["error"] = {**small["error"], "details": None}
        overflow = size(small) - limit
        message = small["error"]["message"]
        small["error"]["message"] = message[: max(0, len(message) - overflow - 3)] + "..."
    if size(small) > limit:
        small["content"] = []
    small["truncated_bytes"] = 0
    small["truncated_bytes"] = before - size(small)
    return small


def fit(items: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], int]:
    """Shrink each item to its share of `budget`; return the items and the bytes removed in all."""
    limit = share(budget, len(items))
    fitted = [shrink(item, limit) for item in items]
    return fitted, sum(item.get("truncated_bytes", 0) for item in fitted)


def page_content(
    blocks: list[dict[str, Any]], cursor: str | None, budget: int
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of content blocks of at most about `budget` bytes from `cursor` ("block.char"), and the next cursor.

    Blocks are whole except a text block longer than the page, which is cut and continued on the next page.
    """
    block, char = (int(part) for part in (cursor or "0.0").split("."))
    page: list[dict[str, Any]] = []
    used = 0
    while block < len(blocks):
        current = blocks[block]
        text = current.get("text") if current.get("type") == "text" else None
        if isinstance(text, str):
            rest = text[char:]
            room = max(1, (budget - used - size({**current, "text": ""})) // 4)  # UTF-8: at most 4 bytes a char
            if page and len(rest) > room and used + size({**current, "text": rest}) > budget:
                return page, f"{block}.{char}"
            piece = rest[:room] if size({**current, "text": rest}) > budget - used else rest
            page.append({**current, "text": piece})
            used += size(page[-1])
            if len(piece) < len(rest):
                return page, f"{block}.{char + len(piece)}"
        else:
            if page and used + size(current) > budget:
                return page, f"{block}.0"
            page.append(current)
            used += size(current)
        block, char = block + 1, 0
    return page, None


def stored_size(record: Any) -> int:
    """Bytes of `record` as the store writes it (`json.dumps` defaults: ASCII, so never less than its UTF-8)."""
    return len(json.dumps(record))


def cap_stored(record: _Record, limit: int) -> _Record:
    """The record itself if it fits `limit` stored bytes, else a copy that does, marked `stored_truncated` with
    `stored_truncated_bytes`. `structured_content` goes first (tools usually repeat it as text, and a reference reads
    a whole JSON text as well); if the content is still too large, its first blocks that fit are kept, the next one
    cut to fit if it is text, the rest dropped, and `structured_content` is kept only if it takes at most half."""
    before = stored_size(record)
    if before <= limit:
        return record
    # `before` as the count while fitting: no count is wider, so the record still fits once the real one is set.
    whole = cast(dict[str, Any], record)
    small = dict(whole, structured_content=None, stored_truncated=True, stored_truncated_bytes=before)
    if stored_size(small) > limit:
        small.update(content=[], structured_content=whole.get("structured_content"))
        if stored_size(small) > limit // 2:
            small["structured_content"] = None
        _fill(small, whole.get("content") or [], limit - stored_size(small))
    # The count's own digits are part of the size: find the count that states itself exactly (with the widest,
    # `before`, the record fits, so any narrower count does too).
    bare = stored_size(small) - len(str(before))
    small["stored_truncated_bytes"] = before - stored_size(small)
    for digits in range(1, len(str(before)) + 1):
        if len(str(before - bare - digits)) == digits:
            small["stored_truncated_bytes"] = before - bare - digits
            break
    return cast(_Record, small)


def _fill(small: dict[str, Any], blocks: list[dict[str, Any]], room: int) -> None:
    """Append to `small["content"]` the first of `blocks` that fit in `room` bytes, the next cut if it is text."""
    for block in blocks:
        need = stored_size(block) + (2 if small["content"] else 0)  # ", " between blocks
        if need <= room:
            small["content"].append(block)
            room -= need
            continue
        text = block.get("text") if block.get("type") == "text" else None
        if isinstance(text, str):
            cut = _longest_prefix(text, room - (need - stored_size(text)))
            if cut:
                small["content"].append({**block, "text": cut})
        break


def _longest_prefix(text: str, room: int) -> str:
    """The longest start of `text` whose JSON string takes at most `room` bytes (escapes count in full)."""
    low, high = 0, min(len(text), max(room - 2, 0))
    while low < high:
        middle = (low + high + 1) // 2
        if stored_size(text[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low]
