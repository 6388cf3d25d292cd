"""References between calls (Melbis' tool_pool): `"@name.field"` in arguments takes a value from an earlier result.

Pure functions over plain data. Only a call *earlier* in the batch can be referenced, so references always form a
DAG: no cycle can be written. A string whose `@name` is not an earlier call's id is plain data and stays as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson


class MissingPath(Exception):
    """The referenced result has no value at this path."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the result of {path.split('.')[0]!r} has no field at {path!r}")
        self.path = path


def _parse(text: str, ids: Mapping[str, int], before: int) -> tuple[int, list[str]] | None:
    """(index of the referenced call, field path) when `text` references a call before index `before`, else None."""
    if not text.startswith("@") or "." not in text:
        return None
    name, *path = text[1:].split(".")
    index = ids.get(name.casefold())
    if index is None or index >= before or not all(path):
        return None
    return index, path


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def may_reference(arguments: Any) -> bool:
    """Cheap pre-test: does any string look like a reference at all? (Once per call of a batch: a loop, not
    `_strings`' generators.)"""
    pending = [arguments]
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if value.startswith("@") and "." in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def any_may_reference(arguments: Sequence[Any], chunk: int = 1_000) -> bool:
    """`may_reference` for any of many calls' arguments. A reference is a string that starts with '@', which orjson
    writes as `"@`: the arguments are written a chunk at a time and only a chunk whose JSON holds `"@` (or that
    orjson cannot write) is looked at call by call."""
    for start in range(0, len(arguments), chunk):
        part = arguments[start : start + chunk]
        try:
            plain = b'"@' not in orjson.dumps(part)
        except orjson.JSONEncodeError:  # an integer over 64 bits
            plain = False
        if not plain and any(may_reference(one) for one in part):
            return True
    return False


def dependencies(arguments: Any, ids: Mapping[str, int], before: int) -> set[int]:
    """Indexes of the calls before `before` that `arguments` reference; `ids` maps casefolded id -> index."""
    return {ref[0] for text in _strings(arguments) if (ref := _parse(text, ids, before)) is not None}


def result_value(record: Mapping[str, Any]) -> Any:
    """What references read from a result: its structured content, else its single text content parsed as JSON."""
    if record.get("structured_content") is not None:
        return record["structured_content"]
    content = record.get("content") or []
    if len(content) == 1 and content[0].get("type") == "text":
        try:
            return json.loads(content[0]["text"])
        except (ValueError, TypeError):
            return None
    return None


def _walk(value: Any, path: list[str], name: str) -> Any:
    for depth, part in enumerate(path):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise MissingPath(".".join([name, *path[: depth + 1]]))
    return value


def resolve(arguments: Any, ids: Mapping[str, int], before: int, values: Mapping[int, Any]) -> Any:
    """`arguments` with every reference replaced by the referenced value, keeping its JSON type.

    `values` maps each referenced index to its result_value. MissingPath names the first path that is not there.
    """
    if isinstance(arguments, str):
        ref = _parse(arguments, ids, before)
        if ref is None:
            return arguments
        index, path = ref
        return _walk(values.get(index), path, arguments[1:].split(".")[0])
    if isinstance(arguments, dict):
        return {key: resolve(item, ids, before, values) for key, item in arguments.items()}
    if isinstance(arguments, list):
        return [resolve(item, ids, before, values) for item in arguments]
    return arguments
