"""A listing's filters from its query: metadata pairs, and times in RFC 3339 or epoch seconds, each fault naming its
parameter and never its value."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mcp_batch.contract.list_filters import filters
from mcp_batch.errors import InvalidBatch


def test_pairs_are_read_by_their_prefix_and_other_parameters_left_alone() -> None:
    found = filters([("metadata.job", "nightly"), ("limit", "5"), ("metadata.team", "a")], None, None)
    assert dict(found.metadata) == {"job": "nightly", "team": "a"}
    assert (found.created_after, found.created_before) == (None, None)


@pytest.mark.parametrize(
    "text",
    ["2026-12-01T08:00:00Z", "2026-12-01t08:00:00z", "2026-12-01T09:30:00+01:30", "2026-12-01T08:00:00.000000Z"],
)
def test_rfc_3339_times_with_any_offset_name_the_same_moment(text: str) -> None:
    expected = int(datetime(2026, 12, 1, 8, tzinfo=UTC).timestamp() * 1_000_000)
    assert filters([], text, None).created_after == expected


def test_epoch_seconds_keep_their_microseconds() -> None:
    assert filters([], None, "1796112000.25").created_before == 1_796_112_000_250_000


def test_a_leap_second_reads_as_the_second_before() -> None:
    assert filters([], "2016-12-31T23:59:60Z", None).created_after == 1_483_228_799_000_000


@pytest.mark.parametrize("text", ["yesterday", "2025-11-30", "2025-11-30T08:00:00", "2026-02-30T00:00:00Z", "-5"])
def test_anything_else_is_a_problem_naming_the_parameter_not_the_value(text: str) -> None:
    with pytest.raises(InvalidBatch) as refused:
        filters([], None, text)
    [problem] = refused.value.problems
    assert problem.loc == ("query", "created_before") and "RFC 3339" in problem.msg and text not in problem.msg


def test_a_pair_given_twice_or_over_its_bounds_is_named_by_its_key() -> None:
    with pytest.raises(InvalidBatch) as refused:
        filters([("metadata.job", "a"), ("metadata.job", "b"), ("metadata.long", "v" * 513)], None, None)
    assert [p.loc for p in refused.value.problems] == [("query", "metadata.job"), ("query", "metadata.long")]
    assert "v" * 20 not in str(refused.value)
