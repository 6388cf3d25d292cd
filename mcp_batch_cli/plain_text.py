"""Text from a server (and so from its backends) made safe to print: no control character reaches the terminal.

A backend answers what it likes, and a terminal obeys what it is sent: `ESC [2J` clears it, `ESC ]0;…BEL` retitles
its window, a carriage return overwrites the line, a bidi override reorders it. Every human-readable output shows
each such character escaped instead (`\\x1b`, `\\x9b`, `\\u202e`), keeping newline and tab where the layout needs
them; JSON output escapes them in JSON's own way (`\\u001b`), so it still parses to the same values.
"""

from __future__ import annotations

import re

# C0 (tab and newline apart), DEL, C1, and the bidi embeddings, overrides, isolates and marks.
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_IN_TEXT = re.compile(f"[{_CONTROL}]")
_ON_ONE_LINE = re.compile(f"[{_CONTROL}\t\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character escaped but newline and tab (a content block's lines)."""
    return _IN_TEXT.sub(_escape, text)


def one_line(text: str) -> str:
    """`text` with every control character escaped, newline and tab too (an id, a name, a table cell)."""
    return _ON_ONE_LINE.sub(_escape, text)


def safe_json(text: str) -> str:
    """A JSON text with the control characters it may hold raw (DEL, C1, bidi; C0 from a lax encoder) written as
    `\\uXXXX` escapes: the same JSON values. Raw, they can only be inside strings (tab and newline stay: they may be
    whitespace between tokens)."""
    return _IN_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
