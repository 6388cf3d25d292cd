"""Checking a backend's `requestedSchema` before it is shown or answered: pure functions over untrusted JSON.

Form mode allows a flat object whose properties are strings (`minLength`, `maxLength`, `format`, `enum` or
`oneOf`/`anyOf` of `const`s), numbers and integers (`minimum`, `maximum`), booleans, and arrays of enum strings
(`items` with `enum` or `anyOf`, `minItems`, `maxItems`). A schema outside that shape (a bound that is not a number,
an `enum` that is not a list, an option that is not an object) cannot be shown as a form or checked against, so it
is refused whole: the worker declines the question to the backend naming the first fault, and an answer to such a
question (one stored before this check) is refused naming the same. A fault names the place, never a value.
"""

from __future__ import annotations

from typing import Any

FIELD_TYPES = frozenset({"string", "number", "integer", "boolean", "array"})
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems")  # non-negative integers
_BOUNDS = ("minimum", "maximum")  # numbers
_TEXTS = ("title", "description", "format")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _choices_fault(field: dict[str, Any], where: str) -> str | None:
    if "enum" in field:
        enum = field["enum"]
        if not isinstance(enum, list) or not all(isinstance(v, str | int | float | bool) for v in enum):
            return f"{where}.enum must be a list of plain values"
    for name in ("oneOf", "anyOf"):
        if name not in field:
            continue
        options = field[name]
        if not isinstance(options, list) or not all(isinstance(o, dict) and "const" in o for o in options):
            return f"{where}.{name} must be a list of objects, each with a const"
    return None


def _field_fault(field: Any, where: str) -> str | None:
    if not isinstance(field, dict):
        return f"{where} must be an object"
    kind = field.get("type")
    if kind not in FIELD_TYPES:
        return f"{where}.type must be one of {', '.join(sorted(FIELD_TYPES))}"
    for name in _TEXTS:
        if name in field and not isinstance(field[name], str):
            return f"{where}.{name} must be a string"
    for name in _COUNTS:
        if name in field and not _is_count(field[name]):
            return f"{where}.{name} must be a non-negative integer"
    for name in _BOUNDS:
        if name in field and not _is_number(field[name]):
            return f"{where}.{name} must be a number"
    for low, high in (("minLength", "maxLength"), ("minItems", "maxItems"), ("minimum", "maximum")):
        if low in field and high in field and field[low] > field[high]:
            return f"{where}.{low} is greater than {high}"
    if kind == "array":
        items = field.get("items")
        if not isinstance(items, dict):
            return f"{where}.items must be an object"
        return _choices_fault(items, f"{where}.items")
    return _choices_fault(field, where)


def schema_fault(schema: Any) -> str | None:
    """The first fault of a requested schema (where, and what it must be), or None when form mode can show it."""
    if not isinstance(schema, dict):
        return "requestedSchema must be an object"
    if schema.get("type", "object") != "object":
        return "requestedSchema.type must be object"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return "requestedSchema.properties must be an object"
    for name, field in properties.items():
        fault = _field_fault(field, f"requestedSchema.properties.{name}")
        if fault is not None:
            return fault
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        return "requestedSchema.required must be a list of field names"
    return None
