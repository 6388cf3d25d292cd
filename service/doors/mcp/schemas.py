"""Tool schemas as lean as their meaning allows: what a model reads on every turn costs its context.

pydantic's schemas carry a `title` for every field and model (the field's name again), spell an optional argument
as `anyOf: [its type, null]` with `default: null`, and define each enum apart with its class's docstring. `lean`
drops those, so the schema states the same constraints in fewer bytes; validation is still the models', by the SDK.
"""

from __future__ import annotations

import json
from typing import Any


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, null]` with `default: null` as X alone: leaving the argument out means the same."""
    variants = schema.get("anyOf")
    if schema.get("default", 0) is not None or not isinstance(variants, list) or len(variants) != 2:
        return schema
    kept = [variant for variant in variants if variant != {"type": "null"}]
    if len(kept) != 1:
        return schema
    rest = {key: value for key, value in schema.items() if key not in ("anyOf", "default")}
    optional: dict[str, Any] = kept[0] | rest
    return optional


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """Each `$ref` to an enum replaced by its values (the field's own description says what they mean), and to a
    definition used once by the definition; shared ones stay in `$defs`."""
    defs = schema.get("$defs", {})
    text = json.dumps(schema)
    once = {name for name in defs if text.count(json.dumps(f"#/$defs/{name}")) == 1}
    replaced = {f"#/$defs/{name}": {"enum": found["enum"]} for name, found in defs.items() if "enum" in found}
    replaced |= {f"#/$defs/{name}": defs[name] for name in once if "enum" not in defs[name]}

    def inline(value: Any) -> Any:
        if isinstance(value, list):
            return [inline(inner) for inner in value]
        if not isinstance(value, dict):
            return value
        ref = value.get("$ref")
        if ref in replaced:
            return inline(replaced[ref]) | {key: inline(inner) for key, inner in value.items() if key != "$ref"}
        return {key: inline(inner) for key, inner in value.items()}

    rest = {name: found for name, found in defs.items() if f"#/$defs/{name}" not in replaced}
    kept: dict[str, Any] = inline({key: value for key, value in schema.items() if key != "$defs"})
    return kept | ({"$defs": inline(rest)} if rest else {})


def lean(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's `schema` without titles, null defaults, optional-null unions, enum definitions and the
    `additionalProperties: true` that JSON Schema assumes."""
    leaned: dict[str, Any] = _leaned(_inline(schema))
    return leaned


def _leaned(schema: Any, properties: bool = False) -> Any:
    """`properties`: `schema` maps names to schemas (a `title` there is a field's name, kept)."""
    if isinstance(schema, list):
        return [_leaned(inner) for inner in schema]
    if not isinstance(schema, dict):
        return schema
    if properties:
        return {name: _leaned(inner) for name, inner in schema.items()}
    schema = _optional(schema)
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and value is None) or (key == "additionalProperties" and value is True):
            continue
        kept[key] = _leaned(value, properties=key in ("properties", "$defs"))
    return kept
