"""Bounding a response by bytes: pure functions over plain data, tested without Redis.

A document's `results` share `response_max_bytes` equally (never less than MIN_SHARE per item); an item over its
share is shrunk deterministically — its content replaced by a note, its structured content dropped — and marked
`truncated` with the bytes removed. The stored item stays whole: GET .../items/{id} pages through it.
"""

from __future__ import annotations

import json
from typing import Any

MIN_SHARE = 1024


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
