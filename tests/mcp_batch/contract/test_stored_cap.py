"""The per-item storage cap: a record over it is cut to fit, by example and by property (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mcp_batch.contract.budget import cap_stored, stored_size

text_blocks = st.builds(lambda text: {"type": "text", "text": text}, st.text(max_size=4_000))
image_blocks = st.builds(
    lambda data: {"type": "image", "data": data, "mimeType": "image/png"}, st.text("AZaz09+/", max_size=4_000)
)
records = st.builds(
    lambda blocks, structured: {
        "status": "ok",
        "content": blocks,
        "structured_content": structured,
        "is_error": False,
        "worker": "host:1",
        "queued_seconds": 0.01,
    },
    st.lists(text_blocks | image_blocks, max_size=6),
    st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=2_000), max_size=3),
)


def big(text: int, structured: int) -> dict[str, Any]:
    return {
        "status": "ok",
        "content": [{"type": "text", "text": "x" * text}],
        "structured_content": {"r": "y" * structured},
    }


@given(records, st.integers(1024, 20_000))
def test_a_capped_record_fits_says_what_it_lost_and_keeps_a_prefix(record: dict[str, Any], limit: int) -> None:
    capped = cap_stored(record, limit)
    if stored_size(record) <= limit:
        assert capped is record
        return
    assert stored_size(capped) <= limit
    assert capped["stored_truncated"] is True
    assert capped["stored_truncated_bytes"] == stored_size(record) - stored_size(capped)
    assert capped["structured_content"] in (None, record["structured_content"])
    kept = capped["content"]
    assert kept[:-1] == record["content"][: len(kept) - 1]  # whole blocks, in order
    if kept:
        last, original = kept[-1], record["content"][len(kept) - 1]
        assert last == original or last["text"] == original["text"][: len(last["text"])]


def test_a_record_within_the_cap_is_stored_as_it_is() -> None:
    record = big(1_000, 1_000)
    assert cap_stored(record, 4_096) is record


def test_structured_content_goes_first_and_the_text_stays_whole_when_that_is_enough() -> None:
    capped = cap_stored(big(8_000, 8_000), 10_000)
    assert capped["structured_content"] is None
    assert capped["content"] == [{"type": "text", "text": "x" * 8_000}]
    assert capped["stored_truncated"] is True and capped["stored_truncated_bytes"] > 7_900


def test_small_structured_content_is_kept_beside_a_cut_text() -> None:
    capped = cap_stored(big(50_000, 1_000), 10_000)
    assert capped["structured_content"] == {"r": "y" * 1_000}
    assert 8_000 < len(capped["content"][0]["text"]) < 9_000
    assert stored_size(capped) <= 10_000


def test_structured_content_over_half_the_cap_is_dropped_when_the_text_is_cut() -> None:
    capped = cap_stored(big(50_000, 50_000), 10_000)
    assert capped["structured_content"] is None
    assert len(capped["content"][0]["text"]) > 9_500


def test_escapes_count_in_full_when_a_text_is_cut() -> None:
    record = {"status": "ok", "content": [{"type": "text", "text": '\u00e9"\n' * 10_000}]}
    capped = cap_stored(record, 2_000)
    assert 1_950 <= stored_size(capped) <= 2_000


def test_blocks_after_the_first_that_does_not_fit_are_dropped() -> None:
    image = {"type": "image", "data": "A" * 5_000, "mimeType": "image/png"}
    small = {"type": "text", "text": "after"}
    capped = cap_stored({"status": "ok", "content": [{"type": "text", "text": "a"}, image, small]}, 2_000)
    assert capped["content"] == [{"type": "text", "text": "a"}]
