"""Whole-batch checks, as pure functions."""

from __future__ import annotations

import pytest

from mcp_batch.contract.validation import validate_batch
from mcp_batch.errors import InvalidBatch
from mcp_batch.models import BatchRequest, Call


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
