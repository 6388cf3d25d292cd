"""Whole-batch checks, as pure functions."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_batch.contract.checks import argument_bytes
from mcp_batch.contract.validation import _call_problems, _clean, validate_batch
from mcp_batch.errors import InvalidBatch
from mcp_batch.models import _DEFAULT_CEILINGS, ID_PATTERN, BatchRequest, Call
from mcp_batch.settings import Settings


def request(n: int, **options: object) -> BatchRequest:
    return BatchRequest.model_validate({"calls": [{"server": "s", "tool": "t"}] * n, **options})


def test_a_valid_batch_gets_the_default_concurrency() -> None:
    assert validate_batch(request(3), 10, 64, 16) == 16
    assert validate_batch(request(3, max_concurrency=4), 10, 64, 16) == 4


def test_every_problem_is_listed_at_once() -> None:
    batch = request(12, max_concurrency=100)
    batch.calls[5] = Call(id="0", server="s", tool="t")
    with pytest.raises(InvalidBatch) as caught:
        validate_batch(batch, 10, 64, 16)
    assert [p.loc for p in caught.value.problems] == [("calls",), ("calls", 5, "id"), ("max_concurrency",)]


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f", "\x80", "\x85", "\x9f", "\u2028", "\u2029"])
def test_an_id_with_a_control_character_or_a_line_separator_is_refused_naming_it(char: str) -> None:
    batch = request(2)
    batch.calls[1] = Call(id=f"ab{char}c", server="s", tool="t")
    with pytest.raises(InvalidBatch) as caught:
        validate_batch(batch, 10, 64, 16)
    [problem] = caught.value.problems
    assert problem.loc == ("calls", 1, "id")
    assert f"U+{ord(char):04X}" in problem.msg and "character 3" in problem.msg


@pytest.mark.parametrize("call_id", ["a/b", "é", "\u200b", "tab-free id", "\u00a0"])
def test_ids_with_other_characters_are_fine(call_id: str) -> None:
    batch = request(1)
    batch.calls[0] = Call(id=call_id, server="s", tool="t")
    assert validate_batch(batch, 10, 64, 16) == 16


def test_the_documented_id_rule_is_the_one_checked() -> None:
    pattern = re.compile(ID_PATTERN)
    for code in [*range(0x3000), 0xFEFF, 0x1F600]:
        batch = request(1)
        batch.calls[0] = Call(id=f"a{chr(code)}", server="s", tool="t")
        try:
            validate_batch(batch, 10, 64, 16)
            accepted = True
        except InvalidBatch:
            accepted = False
        assert accepted == bool(pattern.fullmatch(f"a{chr(code)}")), hex(code)


def test_the_documented_ceilings_are_the_settings_defaults() -> None:
    for name, ceiling in _DEFAULT_CEILINGS.items():
        assert Settings.model_fields[name].default == ceiling, name


ids = (
    st.none()
    | st.text(min_size=1, max_size=6)
    | st.sampled_from(["a", "A", "0", "1", "a.b", "x\x85", "\u2028", "ẞ", "ss"])
)
numbers = st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
arguments = st.dictionaries(st.sampled_from(["n", "m", "text"]), numbers | st.text(max_size=30), max_size=3)
calls = st.builds(
    Call,
    id=ids,
    server=st.just("s"),
    tool=st.just("t"),
    arguments=arguments,
    timeout_seconds=st.none() | st.sampled_from([1.0, 3600.0, 3600.5]),
)


@settings(deadline=None)
@given(st.lists(calls, min_size=1, max_size=80), st.integers(10, 200))
def test_a_whole_batch_is_found_clean_exactly_when_no_call_has_a_fault(batch: list[Call], bound: int) -> None:
    found = _call_problems(batch, 3600.0, bound)
    assert _clean(batch, 3600.0, bound) is not found
    request = BatchRequest(calls=batch)
    if found:
        with pytest.raises(InvalidBatch) as caught:
            validate_batch(request, 100, 64, 16, max_argument_bytes=bound)
        assert caught.value.problems == found
    else:
        assert validate_batch(request, 100, 64, 16, max_argument_bytes=bound) == 16


@pytest.mark.parametrize("arguments", [{"f": [1e-05] * 20}, {"f": [1e16, 1e-07, 0.1]}, {"n": 2**70, "é": "ü"}])
def test_arguments_are_measured_as_json_dumps_writes_them_to_the_byte(arguments: dict[str, object]) -> None:
    size = argument_bytes(arguments)
    batch = BatchRequest(calls=[Call(server="s", tool="t", arguments=arguments)])
    assert validate_batch(batch, 10, 64, 16, max_argument_bytes=size) == 16
    with pytest.raises(InvalidBatch) as caught:
        validate_batch(batch, 10, 64, 16, max_argument_bytes=size - 1)
    [problem] = caught.value.problems
    assert problem.loc == ("calls", 0, "arguments") and f"arguments are {size} bytes" in problem.msg
