"""Bounding a response by bytes: pure functions over plain data, tested without Redis.

Stored items are bounded too: `cap_stored` cuts a result record over the per-item storage cap before it is written,
and that cut is final (`stored_truncated`).

A document's `results` share `response_max_bytes` equally (never less than MIN_SHARE per item); an item over its
share keeps as much of itself as the share holds (`shrink`): every field but the content first, then its `meta` and
its structured content each whole if it fits, then its content cut to fill the rest (whole blocks, then a text block
cut on a character boundary). It is marked `truncated`, with `truncated_bytes` removed and, when content is left
out, the position the rest starts at, which the reader turns into a `next_cursor`. The stored item stays whole:
the item route pages through it from any cursor (`page`).

An item's pageable content is its content blocks, or, for an item with structured content and no content, the
structured content's text form (compact JSON): so structured content that does not fit is still read, as text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import orjson

MIN_SHARE = 1024
_Record = TypeVar("_Record", bound=Mapping[str, object])  # a stored item record (records.ItemRecord)
At = tuple[int, int]  # a position in pageable content: (block, character)


def size(value: Any) -> int:
    """Bytes of `value` as the API serializes it (compact JSON, UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def share(budget: int, count: int) -> int:
    """Each item's equal share of the budget (less the list's brackets and commas)."""
    return max(MIN_SHARE, (budget - 2) // max(count, 1) - 1)


def most_items(budget: int) -> int:
    """How many items one response can hold with every item at its minimum share."""
    return max(1, (budget - 2) // (MIN_SHARE + 1))


def pageable(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The blocks a cursor counts in: the content, or the structured content's text form when there is no content."""
    content: list[dict[str, Any]] = item.get("content") or []
    structured = item.get("structured_content")
    if content or structured is None:
        return content
    return [{"type": "text", "text": json.dumps(structured, ensure_ascii=False, separators=(",", ":"))}]


def _prefix(text: str, room: int, measure: Callable[[Any], int] = size) -> str:
    """The longest start of `text` whose JSON string (quotes and escapes included) takes at most `room` bytes, as
    `measure` counts them (`size`: as the API sends it; `stored_size`: as the store writes it)."""
    low, high = 0, min(len(text), max(room - 2, 0))
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def take(blocks: list[dict[str, Any]], at: At, room: int) -> tuple[list[dict[str, Any]], At | None]:
    """The blocks from `at` whose JSON list fits `room` bytes — whole blocks, then the next one cut on a character
    boundary if it is text — and where the rest starts (None: nothing is left)."""
    block, char = at
    page: list[dict[str, Any]] = []
    used = 2  # []
    while block < len(blocks):
        current = blocks[block]
        if char:
            current = {**current, "text": str(current.get("text", ""))[char:]}
        comma = 1 if page else 0
        whole = size(current)
        if used + comma + whole <= room:
            page.append(current)
            used += comma + whole
            block, char = block + 1, 0
            continue
        text = current.get("text") if current.get("type") == "text" else None
        if isinstance(text, str):
            shell = size({**current, "text": ""}) - 2  # the block without its text's JSON string
            cut = _prefix(text, room - used - comma - shell)
            if cut:
                page.append({**current, "text": cut})
                return page, (block, char + len(cut))
        return page, (block, char)
    return page, None


def _state_bytes(small: dict[str, Any], before: int) -> None:
    """Set `truncated_bytes` to exactly what `small` lacks of `before` bytes (its own digits counted)."""
    small["truncated_bytes"] = 0
    bare = size(small) - 1
    for digits in range(1, len(str(before)) + 1):
        if len(str(before - bare - digits)) == digits:
            small["truncated_bytes"] = before - bare - digits
            return
    small["truncated_bytes"] = before - size(small)


def shrink(item: dict[str, Any], limit: int, cursor_chars: int = 0) -> tuple[dict[str, Any], At | None]:
    """The item itself if it fits `limit` bytes, else a copy filled up to `limit` and where its content resumes.

    `cursor_chars` is reserved for the `next_cursor` the caller makes from the position (None: the content is
    whole in the copy, only `meta` or structured content were left out)."""
    before = size(item)
    if before <= limit:
        return item, None
    small = dict(item, content=[], structured_content=None, meta=None, truncated=True, truncated_bytes=before)
    small["next_cursor"] = "x" * cursor_chars
    if size(small) > limit and small.get("error"):  # even the bare item is too large: cut its error's message
        small["error"] = {**small["error"], "details": None}
        overflow = size(small) - limit
        message = small["error"]["message"]
        small["error"]["message"] = message[: max(0, len(message) - overflow - 3)] + "..."
    for name in ("meta", "structured_content"):  # each kept whole when it fits
        if item.get(name) is not None:
            small[name] = item[name]
            if size(small) > limit:
                small[name] = None
    blocks = item.get("content") or ([] if small["structured_content"] is not None else pageable(item))
    content, resume = take(blocks, (0, 0), limit - size(small) + 2)
    small["content"] = content
    if resume is None:
        small["next_cursor"] = item.get("next_cursor")  # a page read by cursor keeps the cursor to its next page
    _state_bytes(small, before)
    return small, resume


def page(item: dict[str, Any], at: At, limit: int, cursor_chars: int = 0) -> tuple[dict[str, Any], At | None]:
    """The item with only its pageable content from `at` that fits `limit` bytes (no `meta` or structured content:
    they come whole with the first page), and where the next page starts."""
    small = dict(item, content=[], structured_content=None, meta=None, truncated=False, truncated_bytes=0)
    small["next_cursor"] = "x" * cursor_chars
    room = max(limit - size(small) + 2, 64)  # a page always moves on, however small the budget
    content, resume = take(pageable(item), at, room)
    if not content and resume is not None:  # one block larger than a page: sent alone, whole
        content, resume = [pageable(item)[at[0]]], (at[0] + 1, 0)
        resume = resume if resume[0] < len(pageable(item)) else None
    small["content"] = content
    if resume is None:
        small["next_cursor"] = item.get("next_cursor")
    return small, resume


def fit(
    items: list[dict[str, Any]], budget: int, cursor_chars: int = 0
) -> tuple[list[dict[str, Any]], int, dict[int, At]]:
    """Shrink each item to its share of `budget`; the items, the bytes removed in all, and, by position in `items`,
    where the content of each item that was cut resumes."""
    limit = share(budget, len(items))
    fitted: list[dict[str, Any]] = []
    resumes: dict[int, At] = {}
    for k, item in enumerate(items):
        small, resume = shrink(item, limit, cursor_chars)
        fitted.append(small)
        if resume is not None:
            resumes[k] = resume
    return fitted, sum(item.get("truncated_bytes", 0) for item in fitted), resumes


# The most `stored_size` can exceed compact UTF-8 JSON by, per byte: a control character (1 byte) becomes `\u00XX`.
_ASCII_GROWTH = 6


def stored_size(record: Any) -> int:
    """Bytes of `record` as the store writes it (`json.dumps` defaults: ASCII, so never less than its UTF-8)."""
    return len(json.dumps(record))


def cap_stored(record: _Record, limit: int) -> _Record:
    """The record itself if it fits `limit` stored bytes, else a copy that does, marked `stored_truncated` with
    `stored_truncated_bytes`. `structured_content` goes first (tools usually repeat it as text, and a reference reads
    a whole JSON text as well); if the content is still too large, its first blocks that fit are kept, the next one
    cut to fit if it is text, the rest dropped, `structured_content` is kept only if it takes at most half, and
    `meta` is dropped."""
    try:
        if len(orjson.dumps(record)) * _ASCII_GROWTH <= limit:  # surely fits: no need to measure it exactly
            return record
    except TypeError:  # what orjson refuses (an integer past 64 bits): measured the slow way
        pass
    before = stored_size(record)
    if before <= limit:
        return record
    # `before` as the count while fitting: no count is wider, so the record still fits once the real one is set.
    whole = cast(dict[str, Any], record)
    small = dict(whole, structured_content=None, stored_truncated=True, stored_truncated_bytes=before)
    if stored_size(small) > limit:
        small.update(content=[], structured_content=whole.get("structured_content"), meta=None)
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
            cut = _prefix(text, room - (need - stored_size(text)), stored_size)
            if cut:
                small["content"].append({**block, "text": cut})
        break
