"""The strict JSON parser of request bodies, by example and by property (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.bodies.strict_json import MalformedJSON, depth, loads

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=30,
)


@given(values)
def test_whatever_json_dumps_writes_is_read_back(value: Any) -> None:
    assert loads(json.dumps(value).encode(), 64) == value
    assert loads(json.dumps(value, ensure_ascii=False).encode(), 64) == value


@pytest.mark.parametrize(
    ("value", "levels"), [(1, 0), ("s", 0), ([], 1), ({}, 1), ([[1]], 2), ({"a": [{}]}, 3), ([1, [2, [3]]], 3)]
)
def test_depth_counts_levels_of_arrays_and_objects(value: Any, levels: int) -> None:
    assert depth(value) == levels


def test_depth_stops_counting_past_its_stop() -> None:
    assert depth([[[[[[]]]]]], stop=2) == 3


def test_nesting_at_the_limit_is_taken_and_one_more_level_is_not() -> None:
    assert loads(b"[" * 64 + b"]" * 64, 64) is not None
    with pytest.raises(MalformedJSON, match="deeper than 64"):
        loads(b"[" * 65 + b"]" * 65, 64)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 100_000, "deeper than 64"),
        (b'{"a": NaN}', "NaN"),
        (b"[Infinity]", "Infinity"),
        (b"[-Infinity]", "-Infinity"),
        (b"[1e400]", "too large"),
        (b"[" + b"1" * 5_000 + b"]", "too many digits"),
        (b'{"a": 1, "a": 1}', "same key twice"),
        (b'["\\udc00"]', "surrogate"),
        (b'["\\ud800x"]', "surrogate"),
        (b"\xff", "not UTF-8"),
        (b'"\xe9"', "not UTF-8"),
        (b"", "Expecting value"),
        (b"[1,]", "Expecting value"),
    ],
)
def test_what_json_loads_takes_or_chokes_on_is_malformed(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedJSON, match=reason):
        loads(body, 64)


def test_a_surrogate_pair_is_one_character() -> None:
    assert loads(b'["\\ud83d\\ude00", "\\\\ud800"]', 64) == ["\U0001f600", "\\ud800"]
