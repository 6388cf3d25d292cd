"""docs/api.md's contents line: every link goes to a heading that exists, and every section has its link."""

from __future__ import annotations

import re
from pathlib import Path

API = (Path(__file__).parent.parent / "docs" / "api.md").read_text()


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_of_the_contents_goes_to_a_heading_and_every_section_has_one() -> None:
    contents = API.split("\n## ", 1)[0]
    linked = re.findall(r"\]\(#([^)]+)\)", contents)
    headings = re.findall(r"^#{2,4} (.+)$", API, re.MULTILINE)
    anchors = {anchor(heading) for heading in headings}
    assert [link for link in linked if link not in anchors] == []
    sections = [anchor(heading) for heading in re.findall(r"^## (.+)$", API, re.MULTILINE)]
    assert [section for section in sections if section not in linked] == []
