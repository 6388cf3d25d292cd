"""orjson's reading of a body, piece by piece, is the strict parser's: the same value, or the same refusal (the body
is then read by the strict parser). Pieces are made small here, so that a few calls are cut into several."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.bodies import json_pieces
from service.bodies.strict_json import MalformedJSON, loads, strict_loads


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_pieces, "PIECE", 64)
    monkeypatch.setattr(json_pieces, "_LARGEST", 1024)


class Pauses:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def read(body: bytes, max_depth: int = 64) -> tuple[Any, int]:
    """`loads` with a pause, and how many times it paused: the pieces it read, less one."""
    pauses = Pauses()
    return loads(body, max_depth, pauses), pauses.count


def outcome(parse: Any, body: bytes, max_depth: int) -> tuple[Any, ...]:
    try:
        return ("value", parse(body, max_depth, lambda: None))
    except MalformedJSON as exc:
        return ("refused", exc.msg, exc.pos)


def calls_body(calls: list[Any], **members: Any) -> bytes:
    return json.dumps({"calls": calls, **members}).encode()


def test_a_large_body_is_read_in_pieces_as_json_reads_it() -> None:
    body = calls_body([{"server": "s", "tool": "t", "arguments": {"n": i, "x": 1.5}} for i in range(50)], mode="m")
    value, pauses = read(body)
    assert value == json.loads(body)
    assert pauses > 10


def test_cuts_that_would_fall_in_strings_or_inside_arguments_are_not_made() -> None:
    tricky = {"text": '"},{"[[', "items": [{"id": 1}, {"id": 2}, {"id": "},{"}], "q": '\\"},{\\'}
    body = calls_body([{"server": "s", "tool": "t", "arguments": tricky} for _ in range(30)])
    value, pauses = read(body)
    assert value == json.loads(body)
    assert pauses > 5


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        ('{"server": "s", "server": "t"}', "same key twice"),
        ('{"server": "s", "arguments": {"a": 1, "b": {"c": 1, "c": 2}}}', "same key twice"),
        ('{"server": "s", "arguments": {"a": NaN}}', "NaN is not a JSON number"),
        ('{"server": "s", "arguments": {"a": -Infinity}}', "-Infinity is not a JSON number"),
        ('{"server": "s", "arguments": {"a": 1e400}}', "too large to represent"),
        ('{"server": "s", "arguments": {"a": "\\udc00"}}', "unpaired UTF-16 surrogate"),
        ('{"server": "s", "arguments": {"a": [[[[[[[[[[1]]]]]]]]]]}}', "nested deeper than 8 levels"),
        ('{"server": "s", "arguments": {"a": 1,}}', "Expecting property name"),
        ('{"server": "s"', "Expecting property name"),
        ('{"server": "s"} {"server": "s"}', "Expecting ',' delimiter"),
    ],
)
def test_a_fault_deep_in_a_large_body_is_the_strict_parsers_refusal(call: str, reason: str) -> None:
    ok = '{"server": "s", "tool": "t", "arguments": {"n": 1}}'
    body = ('{"calls": [' + ", ".join([ok] * 20 + [call] + [ok] * 20) + '], "mode": "m"}').encode()
    with pytest.raises(MalformedJSON, match=reason) as refused:
        read(body, 8)
    expected = outcome(strict_loads, body, 8)
    assert ("refused", refused.value.msg, refused.value.pos) == expected


def test_a_member_given_before_and_after_the_array_is_refused() -> None:
    body = b'{"mode": "a", "calls": [' + b", ".join([b'{"server": "s"}'] * 40) + b'], "mode": "b"}'
    with pytest.raises(MalformedJSON, match="same key twice"):
        read(body)


def test_the_empty_key_after_the_array_is_read() -> None:  # the last piece is read opened with `{"": [`
    body = calls_body([{"server": "s"}] * 40, **{"": 1})
    assert read(body)[0] == json.loads(body)


def test_large_integers_stay_exact_and_escaped_colons_count() -> None:
    body = calls_body([{"server": "s:\u003a", "arguments": {"n": 2**70 + i, "m": -(2**63) - 1}} for i in range(30)])
    body = body.replace(b"s::", b"s:\\u003a")
    value, _ = read(body)
    assert value == json.loads(body)
    assert value["calls"][3]["arguments"]["n"] == 2**70 + 3
    twice = b'{"calls": [' + b", ".join([b'{"a:": 1, "a\\u003a": 2}'] * 30) + b"]}"
    with pytest.raises(MalformedJSON, match="same key twice"):
        read(twice)


def test_a_call_too_large_for_one_piece_is_read_by_the_strict_parser() -> None:
    calls = [{"server": "s", "arguments": {"n": i}} for i in range(20)]
    calls[10]["arguments"] = {f"k{i}": [i, {"v": "x"}] for i in range(200)}
    body = calls_body(calls)
    assert len(json.dumps(calls[10])) > json_pieces._LARGEST
    assert read(body)[0] == json.loads(body)


characters = st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(list('{}[]:,"\\'))
text = st.text(characters, max_size=8)
keys = st.text(characters, min_size=1, max_size=8)  # now and then the same twice
numbers = st.integers(-1000, 1000) | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    st.none() | st.booleans() | numbers | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
members = st.lists(st.tuples(keys, values), max_size=4)  # a key may come twice


def written(pairs: list[tuple[str, Any]], spaced: bool) -> str:
    """A JSON object of these members in this order, duplicates kept."""
    colon, comma = (": ", ", ") if spaced else (":", ",")
    return "{" + comma.join(json.dumps(k) + colon + json.dumps(v, separators=(comma, colon)) for k, v in pairs) + "}"


@settings(max_examples=100, deadline=None)  # bounded: the suite runs in CI within its time
@given(st.lists(members, min_size=5, max_size=30), members, members, st.booleans(), st.sampled_from([8, 64]))
def test_whatever_the_body_loads_and_the_strict_parser_agree(
    calls: list[list[tuple[str, Any]]],
    before: list[tuple[str, Any]],
    after: list[tuple[str, Any]],
    spaced: bool,
    max_depth: int,
) -> None:
    comma = ", " if spaced else ","
    array = "[" + comma.join(written(call, spaced) for call in calls) + "]"
    top = [written([pair], spaced)[1:-1] for pair in before] + [f'"calls":{array}']
    top += [written([pair], spaced)[1:-1] for pair in after]
    body = ("{" + comma.join(top) + "}").encode()
    assert outcome(loads, body, max_depth) == outcome(strict_loads, body, max_depth)
