"""Cursors: opaque, signed, bound to their tenant, never echoed in a refusal."""

from __future__ import annotations

import pytest

from mcp_batch.contract.item_cursors import CursorKey, Position, cursor_length
from mcp_batch.errors import InvalidCursor
from mcp_batch.store.placement import new_batch_id

KEY = CursorKey(b"a configured secret")


def test_a_cursor_opens_to_where_it_was_issued_for_its_tenant() -> None:
    where = Position(new_batch_id(), 7, 2, 123_456)
    cursor = KEY.issue("acme", where)
    assert KEY.open(cursor, "acme") == where
    assert len(cursor) == cursor_length(where.batch_id)
    assert where.batch_id not in cursor  # opaque: nothing to read or edit in it


@pytest.mark.parametrize(
    ("cursor", "reason"),
    [
        ("", "malformed"),
        ("not a cursor!", "malformed"),
        ("AAAA", "malformed"),
    ],
)
def test_a_cursor_that_is_not_one_is_malformed(cursor: str, reason: str) -> None:
    with pytest.raises(InvalidCursor) as refused:
        KEY.open(cursor, "acme")
    assert reason in refused.value.reason


def test_an_altered_a_foreign_or_another_tenants_cursor_says_why_without_echoing_it() -> None:
    cursor = KEY.issue("acme", Position(new_batch_id(), 1, 0, 10))
    altered = cursor[:-3] + ("AAA" if cursor[-3:] != "AAA" else "BBB")
    cases = [
        (KEY, altered, "acme", "signature"),
        (CursorKey(b"another secret"), cursor, "acme", "signature"),
        (KEY, cursor, "globex", "another tenant"),
    ]
    for key, given, tenant, reason in cases:
        with pytest.raises(InvalidCursor) as refused:
            key.open(given, tenant)
        assert reason in refused.value.reason
        assert given not in str(refused.value) and given not in refused.value.reason
