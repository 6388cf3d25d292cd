"""The bounds of a batch's metadata, checked whole: every fault named by its key and its bound, never its value."""

from __future__ import annotations

from mcp_batch import metadata


def test_pairs_within_the_bounds_have_no_problem() -> None:
    pairs = {f"k{n}": "v" * metadata.MAX_VALUE_LENGTH for n in range(metadata.MAX_PAIRS)}
    assert metadata.problems(pairs) == []
    assert metadata.problems({"x" * metadata.MAX_KEY_LENGTH: ""}) == []
    assert metadata.problems(None) == metadata.problems({}) == []


def test_each_fault_is_named_by_its_key_and_its_bound() -> None:
    long_key = "k" * 100
    found = metadata.problems({"a": "v" * 513, long_key: "x", "": "y"})
    assert [(p.loc, p.type) for p in found] == [
        (("metadata", "a"), "too_long"),
        (("metadata", "k" * 64 + "…"), "too_long"),
        (("metadata", ""), "too_short"),
    ]
    assert all("v" * 10 not in p.msg for p in found)


def test_more_than_sixteen_keys_is_one_problem_of_the_whole() -> None:
    [problem] = metadata.problems({f"k{n}": "v" for n in range(17)})
    assert problem.loc == ("metadata",) and "maximum of 16" in problem.msg
