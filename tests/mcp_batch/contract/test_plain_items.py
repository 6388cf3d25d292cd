"""Items as plain data are exactly what the model serializes: the same fields, in the same order, by example and by
property (hypothesis); what the fast path does not vouch for goes through the model."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_batch.contract import plain_items
from mcp_batch.models import ItemResult, ItemStatus
from mcp_batch.records import dump, error_info, record

HEAD = {"index": 3, "id": "a/b", "server": "demo", "tool": "echo"}


def by_model(fields: dict[str, Any]) -> dict[str, Any]:
    return ItemResult.model_validate(fields).model_dump(mode="json")


def same(found: dict[str, Any], expected: dict[str, Any]) -> None:
    assert found == expected
    assert list(found) == list(expected)  # the same order too


def stored(item_record: Any, seq: int | None = 7) -> bytes:
    """A record as the store keeps it: the worker's JSON with the store's seq."""
    raw = dump(item_record)
    return raw[:-1] + f',"seq":{seq}}}'.encode() if seq is not None else raw


def worker_record(**extra: Any) -> Any:
    return record(
        ItemStatus.ok,
        started=1_700_000_000.25,
        finished=1_700_000_001.5,
        worker="host-1-abc",
        content=[{"type": "text", "text": "Echo: é ✓"}],
        structured_content={"n": 1, "list": [1.5, None, "x"]},
        meta={"trace": "t"},
        is_error=False,
        elapsed_seconds=0.001234,
        attempts=1,
        rate_wait_seconds=1.2e-05,
        **extra,
    ) | {"queued_seconds": 0.5}


@pytest.mark.parametrize(
    "item_record",
    [
        worker_record(),
        worker_record(connect_seconds=0.25, recovered=True, next_cursor="abc"),
        record(ItemStatus.error, worker="w", error=error_info("tool_error", "it failed", "tool"), attempts=2),
        record(ItemStatus.timeout, error=error_info("timeout", "slow", "timeout", seconds=5.0, server="demo")),
        record(ItemStatus.ok, content=[]) | {"stored_truncated": True, "stored_truncated_bytes": 1234},
        {"status": "ok", "started_at": None, "finished_at": None, "error": None, "structured_content": None},
        {"status": "skipped", "some_future_field": {"x": 1}},  # a field the model does not know is dropped
        {"status": "error", "error": {"code": "c", "message": "m", "type": "t", "extra": 1}},  # details: null
    ],
)
def test_a_stored_item_is_what_the_model_serializes(item_record: Any) -> None:
    raw = stored(item_record)
    same(dict(plain_items.stored(HEAD, raw)), by_model(HEAD | json.loads(raw)))


def test_a_plain_item_has_the_models_fields() -> None:
    declared = plain_items.PlainItem.__required_keys__ | plain_items.PlainItem.__optional_keys__
    assert declared == set(ItemResult.model_fields)


def test_the_given_seq_takes_the_place_of_the_records() -> None:
    found = plain_items.stored(HEAD, stored(worker_record(), seq=2), seq=9)
    assert found.get("seq") == 9


def test_an_item_without_a_record_is_what_the_model_serializes() -> None:
    for fields in (HEAD | {"status": "pending"}, HEAD | {"status": "cancelled", "seq": 4}, HEAD | {"status": "ok"}):
        same(dict(plain_items.item(fields)), by_model(fields))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"status":"ok","queued_seconds":1,"attempts":1.0,"is_error":1}',  # the model converts these
        b'{"status":"ok","structured_content":{"n":NaN},"elapsed_seconds":Infinity}',  # only Python's json reads them
        b'{"status":"ok","structured_content":{"big":123456789012345678901234567890,"neg":-9223372036854775809}}',
        b'{"status":"ok","content":[{"type":"text","text":"\\ud800"}]}',  # a lone surrogate
        b'{"status":"ok","error":{"code":"c","message":"m","type":"t","details":null},"index":"4"}',
    ],
)
def test_values_the_fast_path_does_not_vouch_for_go_through_the_model(raw: bytes) -> None:
    same(dict(plain_items.stored(HEAD, raw)), by_model(HEAD | json.loads(raw)))


def test_an_integer_past_64_bits_is_kept_exactly() -> None:
    found = plain_items.stored(HEAD, b'{"status":"ok","structured_content":123456789012345678901234567890}')
    assert found.get("structured_content") == 123456789012345678901234567890
    assert b"123456789012345678901234567890" in plain_items.line(found)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"status":"finished-ish"}',
        b'{"started_at":"x"}',
        b'{"status":"ok","truncated":null}',
        b'{"status":"ok","content":["text"]}',
        b'{"status":"ok","error":{"code":1,"message":"m","type":"t"}}',
    ],
)
def test_what_the_model_refuses_is_refused(raw: bytes) -> None:
    with pytest.raises(ValidationError):
        by_model(HEAD | json.loads(raw))
    with pytest.raises(ValidationError):
        plain_items.stored(HEAD, raw)


def test_a_line_is_compact_json_and_a_newline() -> None:
    found = plain_items.stored(HEAD, stored(worker_record()))
    line = plain_items.line(found)
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and b'", "' not in line
    assert json.loads(line) == found and "Echo: é ✓".encode() in line


text = st.text(max_size=6)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(text, inner, max_size=2),
    max_leaves=4,
)
objects = st.dictionaries(text, json_values, max_size=2)
field_values = {
    "started_at": st.none() | text,
    "worker": st.none() | text,
    "content": st.none() | st.lists(objects, max_size=2),
    "structured_content": json_values,
    "meta": st.none() | objects,
    "is_error": st.none() | st.booleans() | st.integers(0, 1),
    "error": st.none()
    | st.fixed_dictionaries({"code": text, "message": text, "type": text}, optional={"details": st.none() | objects}),
    "elapsed_seconds": st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 5),
    "attempts": st.none() | st.integers(),
    "recovered": st.booleans(),
    "stored_truncated_bytes": st.integers(0, 2**70),
    "seq": st.none() | st.integers(1, 10**6),
    "unknown": json_values,
}
records = st.fixed_dictionaries({"status": st.sampled_from([s.value for s in ItemStatus])}, optional=field_values)


@given(records)
def test_any_stored_record_gives_what_the_model_serializes(item_record: dict[str, Any]) -> None:
    raw = json.dumps(item_record, ensure_ascii=False, separators=(",", ":")).encode()
    expected = by_model(HEAD | json.loads(raw))
    found = plain_items.stored(HEAD, raw)
    same(dict(found), expected)
    assert orjson.loads(plain_items.line(found)) == orjson.loads(plain_items.line(expected))
