"""Strict JSON for request bodies: one parser that refuses, with a reason, what Python's `json` takes or chokes on.

`json.loads` accepts NaN and Infinity, lets a later duplicate key win, turns `1e400` into infinity, keeps unpaired
UTF-16 surrogates (which then fail when the value is encoded), guesses UTF-16/32, and raises RecursionError or a
plain ValueError (an integer over 4,300 digits) where a caller expects a decode error. Each of those is a
`MalformedJSON` here, saying what is wrong and never quoting the body.

`loads` reads a body with orjson first (`json_pieces`: several times faster, and a piece at a time for a large
body), where that is known to give this parser's value; any other body, a malformed one among them, is read by this
parser (`strict_loads`), which says why it is refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from service.bodies.json_pieces import Unsure, read_pieces

# A \uD800-\uDFFF escape: either half of a surrogate pair, or a lone one (the full check runs only when one appears).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class MalformedJSON(ValueError):
    """The body is not acceptable JSON; `msg` says why and `pos` is the offset (0 when unknown)."""

    def __init__(self, msg: str, pos: int = 0) -> None:
        super().__init__(msg)
        self.msg = msg
        self.pos = pos


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise MalformedJSON("a number is too large to represent")
    return value


def _constant(name: str) -> Any:
    raise MalformedJSON(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise MalformedJSON("an object has the same key twice")
    return value


def depth(value: Any, stop: int | None = None) -> int:
    """Levels of arrays and objects in `value` (0 for a scalar), level by level without recursion; counting stops
    once past `stop`."""
    level = [value] if isinstance(value, dict | list) else []
    levels = 0
    while level and (stop is None or levels <= stop):
        levels += 1
        below = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, dict | list):
                    below.append(child)
        level = below
    return levels


class _Pausing:
    """The parser's hooks, calling `pause` every `every` objects and numbers: a parse in a worker thread then lets
    the event loop's thread take the GIL at short intervals (C code gives it up only when it calls back into Python)."""

    def __init__(self, pause: Callable[[], None], every: int = 256) -> None:
        self.pause, self.every, self.count = pause, every, 0

    def _tick(self) -> None:
        self.count += 1
        if self.count % self.every == 0:
            self.pause()

    def object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        self._tick()
        return _object(pairs)

    def float(self, text: str) -> float:
        self._tick()
        return _finite(text)

    def int(self, text: str) -> int:
        self._tick()
        return int(text)


def loads(body: bytes, max_depth: int, pause: Callable[[], None] | None = None) -> Any:
    """The JSON value of a UTF-8 body, or MalformedJSON: not UTF-8, not JSON, NaN/Infinity, a number out of range,
    a duplicate key, an unpaired surrogate, or arrays and objects nested deeper than `max_depth`.

    `pause`: called every few milliseconds of parsing, for a parse off the event loop."""

    def slow(piece: bytes, levels: int) -> Any:  # a piece too long for orjson to hold the GIL over
        try:
            return strict_loads(piece, levels, pause)
        except MalformedJSON:
            raise Unsure from None  # the reason is given for the whole body, at its offset

    try:
        return read_pieces(body, max_depth, pause, slow)
    except Unsure:
        return strict_loads(body, max_depth, pause)


def strict_loads(body: bytes, max_depth: int, pause: Callable[[], None] | None = None) -> Any:
    """`loads`, by the parser of this module alone (`pause`: called every few hundred values, see `_Pausing`)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedJSON("the body is not UTF-8", exc.start) from None
    hooks: dict[str, Any] = {"parse_float": _finite, "object_pairs_hook": _object}
    if pause is not None:
        pausing = _Pausing(pause)
        hooks = {"parse_float": pausing.float, "parse_int": pausing.int, "object_pairs_hook": pausing.object}
    try:
        value = json.loads(text, parse_constant=_constant, **hooks)
    except json.JSONDecodeError as exc:
        raise MalformedJSON(exc.msg, exc.pos) from None
    except RecursionError:
        raise MalformedJSON(f"arrays and objects nested deeper than {max_depth} levels") from None
    except MalformedJSON:
        raise
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
        raise MalformedJSON("a number has too many digits") from None
    if depth(value, max_depth) > max_depth:
        raise MalformedJSON(f"arrays and objects nested deeper than {max_depth} levels")
    if _SURROGATE_ESCAPE.search(body):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedJSON("a string holds an unpaired UTF-16 surrogate") from None
    return value
