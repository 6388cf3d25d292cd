"""Control characters made visible for the terminal, and kept out of JSON output as JSON's own escapes."""

from __future__ import annotations

import json

from mcp_batch_cli.plain_text import one_line, printable, safe_json

HOSTILE = "a\x1b[2Jb\x1b]0;t\x07c\x9b2Jd\re\u202ef\x7fg\th\ni\u2028"


def test_text_keeps_its_newlines_and_tabs_and_shows_every_other_control_escaped() -> None:
    assert printable(HOSTILE) == "a\\x1b[2Jb\\x1b]0;t\\x07c\\x9b2Jd\\x0de\\u202ef\\x7fg\th\ni\u2028"
    assert printable("plain é 漢字") == "plain é 漢字"


def test_one_line_escapes_newlines_and_tabs_too() -> None:
    assert one_line("id\nfake line\t") == "id\\x0afake line\\x09"


def test_json_output_holds_the_same_values_with_no_control_raw() -> None:
    text = json.dumps({"text": HOSTILE}, ensure_ascii=False)
    safe = safe_json(text)
    assert json.loads(safe) == {"text": HOSTILE}
    assert not any(c in safe for c in "\x1b\x9b\x7f\u202e\x07\r")
