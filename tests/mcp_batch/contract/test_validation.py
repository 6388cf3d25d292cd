"""Whole-batch checks, as pure functions."""

from __future__ import annotations

import re

import pytest

from mcp_batch.contract.validation import validate_batch
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
