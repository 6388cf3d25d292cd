"""The byte-budget shrinker, by example and by property (hypothesis): pages stay within budget, a cut item fills its
share, and reading on from where a cut item stops gives back exactly what was cut."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_batch.contract.budget import MIN_SHARE, fit, most_items, page, pageable, share, shrink, size

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
items = st.builds(
    lambda index, name, text, structured: {
        "index": index,
        "id": name,
        "server": "demo",
        "tool": "big",
        "status": "ok",
        "content": [{"type": "text", "text": text}],
        "structured_content": structured,
        "error": None,
        "truncated": False,
        "truncated_bytes": 0,
    },
    st.integers(0, 10_000),
    names,
    st.text(max_size=3_000),
    st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=500), max_size=3),
)


@given(st.lists(items, min_size=1, max_size=40), st.integers(MIN_SHARE, 60_000))
def test_a_shrunk_page_never_exceeds_its_budget(page: list[dict[str, Any]], budget: int) -> None:
    page = page[: most_items(budget)]
    fitted, removed, _ = fit(page, budget, cursor_chars=94)
    for item in fitted:
        if item.get("next_cursor"):
            item["next_cursor"] = "c" * 94  # as long as the real cursor the reader puts there
    assert size(fitted) <= budget
    assert removed == sum(item["truncated_bytes"] for item in fitted)
    assert all(item["truncated"] == (item is not original) for item, original in zip(fitted, page, strict=True))


@given(st.lists(items, min_size=1, max_size=10))
def test_a_page_under_budget_is_untouched(page: list[dict[str, Any]]) -> None:
    budget = max(size(item) for item in page) * len(page) + MIN_SHARE
    assert fit(page, budget) == (page, 0, {})


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=2_000)


@given(st.lists(texts, min_size=1, max_size=6), st.integers(MIN_SHARE, 3_000), st.integers(300, 3_000))
def test_a_cut_item_read_on_from_its_cursor_loses_nothing(chunks: list[str], limit: int, page_bytes: int) -> None:
    blocks = [{"type": "text", "text": t} for t in chunks] + [{"type": "image", "data": "AAAA", "mimeType": "x"}]
    item = {"index": 0, "id": "a", "server": "s", "tool": "t", "status": "ok", "content": blocks}
    first, resume = shrink(item, limit, cursor_chars=94)
    collected = list(first["content"])
    for _ in range(10_000):
        if resume is None:
            break
        next_page, resume = page(item, resume, page_bytes, cursor_chars=94)
        collected += next_page["content"]
    # a text block cut across pages comes back in pieces, in order
    assert "".join(b["text"] for b in collected if b["type"] == "text") == "".join(chunks)
    assert collected[-1]["type"] == "image"


@settings(max_examples=30, deadline=None)  # texts of 5,000-20,000 characters: bounded, the suite runs within CI's time
@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=5_000, max_size=20_000))
def test_a_cut_text_fills_its_share_to_the_last_character(text: str) -> None:
    item = {
        "index": 0,
        "id": "a",
        "server": "s",
        "tool": "t",
        "status": "ok",
        "content": [{"type": "text", "text": text}],
    }
    limit = share(4_000, 1)
    small, resume = shrink(item, limit, cursor_chars=94)
    assert resume is not None and small["truncated"]
    kept = small["content"][0]["text"]
    assert text.startswith(kept) and resume == (0, len(kept))
    assert limit - 12 < size(small) <= limit  # short of the budget by less than one more (escaped) character
    assert small["truncated_bytes"] == size(item) - size(small)


def test_structured_content_is_kept_whole_when_it_fits_and_read_as_text_when_it_does_not() -> None:
    structured = {"rows": list(range(300))}  # 1,100 bytes
    item = {
        "index": 0,
        "id": "a",
        "server": "s",
        "tool": "t",
        "status": "ok",
        "content": [],
        "structured_content": structured,
    }
    whole, resume = shrink({**item, "meta": {"m": "x" * 2_000}}, 1_500)
    assert whole["structured_content"] == structured and whole["meta"] is None and resume is None
    cut, resume = shrink(item, MIN_SHARE)
    assert cut["structured_content"] is None and resume is not None
    assert pageable(item)[0]["text"].startswith(cut["content"][0]["text"])
