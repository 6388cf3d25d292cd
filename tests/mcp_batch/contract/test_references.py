"""The reference resolver, by example and by property (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_batch.contract.references import (
    MissingPath,
    any_may_reference,
    dependencies,
    may_reference,
    resolve,
    result_value,
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text("abc", min_size=1, max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


def test_a_reference_takes_the_value_at_its_path() -> None:
    ids = {"cur": 0, "goods": 1}
    values = {0: {"id": 12}, 1: {"row": {"id": 7}, "list": [{"id": "a"}, {"id": "b"}]}}
    arguments = {"data": [{"id": "@cur.id"}], "row": "@goods.row.id", "second": "@goods.list.1.id", "n": 3}
    assert resolve(arguments, ids, 2, values) == {"data": [{"id": 12}], "row": 7, "second": "b", "n": 3}


def test_names_are_matched_ignoring_case_and_only_earlier_calls_count() -> None:
    ids = {"cur": 0, "later": 5}
    assert dependencies({"a": "@CUR.id", "b": "@later.id", "c": "@cur", "d": "x@cur.id"}, ids, 2) == {0}


def test_a_missing_field_names_its_path() -> None:
    with pytest.raises(MissingPath) as caught:
        resolve("@cur.row.id", {"cur": 0}, 1, {0: {"row": {}}})
    assert caught.value.path == "cur.row.id"


def test_results_are_read_from_structured_content_or_json_text() -> None:
    assert result_value({"structured_content": {"a": 1}, "content": []}) == {"a": 1}
    assert result_value({"content": [{"type": "text", "text": '{"a": 2}'}]}) == {"a": 2}
    assert result_value({"content": [{"type": "text", "text": "not json"}]}) is None


@given(value=json_values)
def test_a_referenced_value_keeps_its_json_type(value: Any) -> None:
    assert resolve({"x": ["@src.v"]}, {"src": 0}, 1, {0: {"v": value}}) == {"x": [value]}


@given(arguments=json_values, position=st.integers(0, 20))
def test_dependencies_always_point_backwards_so_no_cycle_can_exist(arguments: Any, position: int) -> None:
    ids = {f"c{i}": i for i in range(21)}
    text_refs = {"r": [f"@c{i}.v" for i in range(21)], "other": arguments}
    assert all(index < position for index in dependencies(text_refs, ids, position))


@given(arguments=json_values)
def test_arguments_without_references_are_untouched(arguments: Any) -> None:
    assert resolve(arguments, {}, 0, {}) == arguments


@settings(deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "@b.c", "x"]), json_values | st.just("@a.b"), max_size=3)))
def test_any_may_reference_is_may_reference_for_any_call(arguments: list[dict[str, Any]]) -> None:
    assert any_may_reference(arguments, chunk=3) == any(may_reference(one) for one in arguments)


def test_arguments_orjson_cannot_write_are_looked_at_call_by_call() -> None:
    assert any_may_reference([{"n": 2**70, "r": "@a.b"}])
    assert not any_may_reference([{"n": 2**70, "@a.b": 1}])  # a key is not a reference
