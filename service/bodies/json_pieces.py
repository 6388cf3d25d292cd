"""Reading a JSON body with orjson, a piece at a time, trusted only where it reads the body exactly as the strict
parser of `strict_json` would.

orjson refuses what that parser refuses (NaN, Infinity, a number too large for a float, unpaired surrogates, bytes
that are not UTF-8), but it keeps the last of a key given twice and reads an integer over 64 bits as a float. So a
piece it read is taken only when
  - its text has as many colons as its value written back by orjson: one per member, and a key given twice is one
    member less (an escaped colon, `\\u003a`, would throw the count off: such a piece is not taken);
  - it has no integer of 19 digits or more (strict_json keeps an integer exact, orjson may not);
  - its arrays and objects nest no deeper than allowed, counted on its brackets outside strings.
Anything else raises `Unsure`, and the caller reads the body with the strict parser, which gives the reason when
there is one. A body is never taken that the strict parser refuses, and what is taken is the value it would give.

A large body is cut into pieces of about `PIECE` bytes between the elements of the long array its top-level object
holds (a batch's `calls`): orjson is C code that keeps the GIL from start to end, so a piece at a time, with `pause`
between pieces, the event loop's thread gets a turn every few milliseconds. A cut falls after an element's closing
`}`, before the next one's `{`, where the brackets outside strings leave two open (`{"calls": [`): the first piece is
then read closed with `]}`, the middle ones as arrays, the last opened with `{"": [`; each parse confirms its cut
(a piece cut in a string or at another level is not JSON). A piece much larger than `PIECE` (one huge call) is read
by `slow`, the strict parser with its pauses.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

PIECE = 256 * 1024  # bytes orjson reads at a time: ~3 ms holding the GIL
_LARGEST = 4 * PIECE  # a piece over this is read by the pausing parser
_SKIPS = 64  # cuts that fall in strings, one after another, before the rest is left one piece

_BOUNDARY = re.compile(rb"\}\s*,\s*(?=\{)")
_STRING = re.compile(rb'"[^"]*"')
_OTHER_BYTES = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_ONE_BRACKET = bytes.maketrans(b"{}", b"[]")
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG_INTEGER = re.compile(rb"(?:^|[\[:,])\s*-?\d{19}")
_ESCAPED_COLON = re.compile(rb"\\u003[aA]")

Slow = Callable[[bytes, int], Any]  # the strict parser for one piece: (text, levels allowed) -> value, or Unsure


class Unsure(Exception):
    """orjson's reading of the body is not known to be the strict parser's: read it with that parser."""


def read_pieces(body: bytes, max_depth: int, pause: Callable[[], None] | None = None, slow: Slow | None = None) -> Any:
    """The JSON value of `body`, or Unsure. With `pause`, a large body is read in pieces, `pause()` between them."""
    cuts, marks = _cuts(body) if pause is not None and len(body) > PIECE else ([], [])
    if not cuts:
        if pause is not None and len(body) > _LARGEST:
            raise Unsure  # no place to cut: one piece too long to hold the GIL for
        return _take(body, _brackets(body)[0], max_depth)
    assert pause is not None
    head = _take(body[: cuts[0][0]] + b"]}", marks[0] + b"]]", max_depth, slow)
    items = head.get(next(reversed(head))) if isinstance(head, dict) and head else None
    if not isinstance(items, list):
        raise Unsure
    for (_, start), (end, _), brackets in zip(cuts, cuts[1:], marks[1:], strict=False):
        pause()
        items += _take(b"[" + body[start:end] + b"]", b"[[" + brackets + b"]]", max_depth, slow, context=1)
    pause()
    last = body[cuts[-1][1] :]
    tail = _take(b'{"":[' + last, b"[[" + _brackets(last)[0], max_depth, slow)
    rest = tail.pop("", None) if isinstance(tail, dict) else None
    if not isinstance(rest, list) or tail.keys() & head.keys():
        raise Unsure  # a member of the top-level object given before and after the array
    items += rest
    head.update(tail)
    return head


def _take(text: bytes, brackets: bytes, max_depth: int, slow: Slow | None = None, context: int = 0) -> Any:
    """orjson's value of one piece, if it is the strict parser's; `brackets` are the piece's in their place in the
    body, `context` the levels around the piece that its text leaves out."""
    if slow is not None and len(text) > _LARGEST:
        return slow(text, max_depth - context)
    if _levels(brackets, max_depth) > max_depth or _unsure(text):
        raise Unsure
    try:
        value = orjson.loads(text)
        written = orjson.dumps(value)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        raise Unsure from None
    if text.count(b":") != written.count(b":"):
        raise Unsure  # a key given twice: orjson kept one
    return value


def _unsure(text: bytes) -> bool:
    """An integer token of 19 digits or more (over 64 bits, orjson reads a float), or an escaped colon."""
    if b"0" * 19 in text.translate(_DIGITS) and _LONG_INTEGER.search(text):
        return True
    return b"\\u003" in text and _ESCAPED_COLON.search(text) is not None


def _brackets(text: bytes) -> tuple[bytes, int]:
    """The brackets of `text` outside its strings, all as `[` and `]`, and how many string quotes it holds (odd: it
    ends inside a string). Exact for JSON: `\\\\` and `\\"` go first (pairs from the left, as escapes read), then
    what lies between quotes."""
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = text.translate(None, _OTHER_BYTES)
    quotes = marks.count(b'"')
    marks = marks.replace(b'""', b"")  # the strings without brackets (most of them), and adjacent quotes
    if b'"' in marks:
        marks = _STRING.sub(b"", marks)
    return marks.translate(_ONE_BRACKET), quotes


def _levels(brackets: bytes, stop: int) -> int:
    """Nesting of balanced brackets (0 for none): each pass takes away the innermost pairs; counting stops past
    `stop`."""
    levels = 0
    while brackets and levels <= stop:
        brackets = brackets.replace(b"[]", b"")
        levels += 1
    return levels


def _cuts(body: bytes) -> tuple[list[tuple[int, int]], list[bytes]]:
    """Where to cut `body`: (end of one element, start of the next) about every PIECE bytes, at two open brackets;
    and the brackets of the body before each cut since the one before."""
    cuts: list[tuple[int, int]] = []
    marks: list[bytes] = []
    piece: list[bytes] = []
    base, level, want, skips = 0, 0, PIECE, 0
    while (found := _BOUNDARY.search(body, want)) is not None and skips < _SKIPS:
        end, want = found.start() + 1, found.end()
        brackets, quotes = _brackets(body[base:end])
        if quotes % 2:  # in a string
            skips += 1
            continue
        piece.append(brackets)
        level += brackets.count(b"[") - brackets.count(b"]")
        base, skips = end, 0
        if level == 2:
            cuts.append((end, found.end()))
            marks.append(b"".join(piece))
            piece = []
            want += PIECE
    return cuts, marks
