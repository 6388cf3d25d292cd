"""Items as plain data: what `ItemResult` serializes to (`model_dump(mode="json")`), built without the model.

The reads that carry many items (/results, the event stream, a page of the document) build each item from its
call's head (index, id, server, tool) and its stored record (`records.record()` and the store's `seq`): a dict in the
model's field order, null fields left out, the model's defaults filled in, fields the model does not know dropped.
The model's validation is skipped only for what it would keep as it is (a string where it takes a string, a finite
float where a float...): an item with any other value, or a record that only Python's own `json` reads exactly (NaN,
an integer past 64 bits), is built by the model, so the output is the model's in every case.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict, cast

import orjson

from mcp_batch.models import ItemResult, ItemStatus


class PlainItem(TypedDict):
    """An item as the API sends it (`ItemResult`, serialized): fields that do not apply are left out."""

    index: int
    id: str
    server: str
    tool: str
    status: str
    content: NotRequired[list[dict[str, Any]]]
    structured_content: NotRequired[Any]
    meta: NotRequired[dict[str, Any]]
    is_error: NotRequired[bool]
    error: NotRequired[dict[str, Any]]
    input_request: NotRequired[dict[str, Any]]
    started_at: NotRequired[str]
    finished_at: NotRequired[str]
    queued_seconds: NotRequired[float]
    connect_seconds: NotRequired[float]
    rate_wait_seconds: NotRequired[float]
    elapsed_seconds: NotRequired[float]
    worker: NotRequired[str]
    seq: NotRequired[int]
    truncated: bool
    truncated_bytes: int
    next_cursor: NotRequired[str]
    attempts: NotRequired[int]
    recovered: bool
    stored_truncated: bool
    stored_truncated_bytes: int
    progress: NotRequired[dict[str, Any]]


_STATUSES = frozenset(status.value for status in ItemStatus)
_ERROR = ("code", "message", "type")
# The type of each field's value that the model keeps as it is (None: any JSON value), in the model's order.
_TYPES: dict[str, type | None] = {
    "index": int,
    "id": str,
    "server": str,
    "tool": str,
    "status": str,
    "content": list,
    "structured_content": None,
    "meta": dict,
    "is_error": bool,
    "error": dict,
    "input_request": dict,
    "started_at": str,
    "finished_at": str,
    "queued_seconds": float,
    "connect_seconds": float,
    "rate_wait_seconds": float,
    "elapsed_seconds": float,
    "worker": str,
    "seq": int,
    "truncated": bool,
    "truncated_bytes": int,
    "next_cursor": str,
    "attempts": int,
    "recovered": bool,
    "stored_truncated": bool,
    "stored_truncated_bytes": int,
    "progress": dict,
}
_MODEL = ItemResult.model_fields
if list(_TYPES) != list(_MODEL):  # a field added to the model must be added here, in its place
    raise RuntimeError("plain_items does not match ItemResult's fields")
_DEFAULTS = {name: f.default for name, f in _MODEL.items() if not f.is_required() and f.default is not None}
_ALWAYS = frozenset(name for name, f in _MODEL.items() if f.is_required()) | _DEFAULTS.keys()  # never left out
_FIELDS = tuple((name, kind, _DEFAULTS.get(name)) for name, kind in _TYPES.items())
_FLOATS = tuple(name for name, kind in _TYPES.items() if kind is float)
# Digits that may be an integer past 64 bits, which orjson reads as a float (Python's json reads it exactly).
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))  # every digit a 0, anything else a space
_LONG_NUMBER = b"0" * 19


def item(fields: Mapping[str, Any]) -> PlainItem:
    """The item `ItemResult.model_validate(fields)` serializes to (a ValidationError where it raises one); `fields`
    hold JSON values (a record as stored, a call's head, a status)."""
    built: dict[str, Any] = {}
    get = fields.get
    for name, kind, default in _FIELDS:
        value = get(name, default)
        if value is None:
            continue
        if kind is not None and type(value) is not kind:  # e.g. an int where the model makes it a float
            return by_model(fields)
        built[name] = value
    if not built.keys() >= _ALWAYS:  # a required field missing, or null where the model takes no null
        return by_model(fields)
    if built["status"] not in _STATUSES:
        return by_model(fields)
    if "content" in built and not all(type(block) is dict for block in built["content"]):
        return by_model(fields)
    for name in _FLOATS:
        if name in built and not math.isfinite(built[name]):  # the model makes it null
            return by_model(fields)
    if "error" in built:
        error = _error(built["error"])
        if error is None:
            return by_model(fields)
        built["error"] = error
    return cast(PlainItem, built)


def _error(value: dict[str, Any]) -> dict[str, Any] | None:
    """An `ItemError` as the model serializes it: its three strings and `details` (null when absent), other fields
    dropped; None for anything else."""
    if not all(type(value.get(name)) is str for name in _ERROR):
        return None
    details = value.get("details")
    if details is not None and type(details) is not dict:
        return None
    return {"code": value["code"], "message": value["message"], "type": value["type"], "details": details}


def by_model(fields: Mapping[str, Any]) -> PlainItem:
    """The item as the model builds it: for the values `item` does not vouch for."""
    return cast(PlainItem, ItemResult.model_validate(fields).model_dump(mode="json"))


def stored(head: Mapping[str, Any], raw: bytes, seq: int | None = None) -> PlainItem:
    """The item of a call (`head`: its index, id, server and tool) from its stored record; `seq`, when given, in
    place of the record's."""
    record = _decode(raw)
    if record is None:  # only Python's json reads it exactly: the model judges every value
        fields = {**head, **json.loads(raw)}
        if seq is not None:
            fields["seq"] = seq
        return by_model(fields)
    fields = {**head, **record}
    if seq is not None:
        fields["seq"] = seq
    return item(fields)


def _decode(raw: bytes) -> dict[str, Any] | None:
    """The record as orjson reads it; None when only Python's json reads it exactly."""
    if _LONG_NUMBER in raw.translate(_DIGITS):
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:  # NaN, Infinity, a lone surrogate: Python's json takes them
        return None
    return value if type(value) is dict else None


def line(found: Mapping[str, Any]) -> bytes:
    """One JSON line: the item as compact JSON (as every JSON response of the API), then a newline."""
    try:
        return orjson.dumps(found, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # an integer past 64 bits (read by Python's json)
        return json.dumps(found, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
