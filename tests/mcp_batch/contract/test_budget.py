"""The byte-budget shrinker, by example and by property (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mcp_batch.contract.budget import MIN_SHARE, fit, most_items, page_content, size

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
    fitted, removed = fit(page, budget)
    assert size(fitted) <= budget
    assert removed == sum(item["truncated_bytes"] for item in fitted)
    assert all(item["truncated"] == (item is not original) for item, original in zip(fitted, page, strict=True))


@given(st.lists(items, min_size=1, max_size=10))
def test_a_page_under_budget_is_untouched(page: list[dict[str, Any]]) -> None:
    budget = max(size(item) for item in page) * len(page) + MIN_SHARE
    assert fit(page, budget) == (page, 0)


@given(st.lists(st.text(max_size=2_000), min_size=1, max_size=6), st.integers(200, 3_000))
def test_paging_content_loses_nothing(texts: list[str], budget: int) -> None:
    blocks = [{"type": "text", "text": t} for t in texts] + [{"type": "image", "data": "AAAA", "mimeType": "x"}]
    cursor: str | None = None
    collected: list[dict[str, Any]] = []
    for _ in range(10_000):
        page, cursor = page_content(blocks, cursor, budget)
        collected += page
        if cursor is None:
            break
    # a text block cut across pages comes back in pieces, in order
    assert "".join(b["text"] for b in collected if b["type"] == "text") == "".join(texts)
    assert collected[-1]["type"] == "image"
