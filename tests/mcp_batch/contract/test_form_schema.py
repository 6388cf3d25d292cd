"""A backend's requestedSchema checked before it is shown, without Redis: form mode's shapes pass, anything else is
named by its place (never a value), and nothing raises whatever JSON comes."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_batch.contract.form_schema import schema_fault


def form(**field: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"f": field}}


def test_form_modes_shapes_pass() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 50, "format": "email"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "ratio": {"type": "number", "minimum": 0.5},
            "ok": {"type": "boolean", "default": True},
            "pet": {"type": "string", "enum": ["cat", "dog"]},
            "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
            "tools": {"type": "array", "items": {"enum": ["a"]}, "minItems": 1, "maxItems": 2},
        },
        "required": ["name"],
    }
    assert schema_fault(schema) is None
    assert schema_fault({"type": "object", "properties": {}}) is None


@pytest.mark.parametrize(
    ("schema", "fault"),
    [
        (form(type="integer", minimum="5"), "requestedSchema.properties.f.minimum must be a number"),
        (form(type="string", enum=5), "requestedSchema.properties.f.enum must be a list of plain values"),
        (
            form(type="string", oneOf=["x"]),
            "requestedSchema.properties.f.oneOf must be a list of objects, each with a const",
        ),
        (form(type="string", maxLength=-1), "requestedSchema.properties.f.maxLength must be a non-negative integer"),
        (form(type="string", minLength=True), "requestedSchema.properties.f.minLength must be a non-negative integer"),
        (form(type="array", items="x"), "requestedSchema.properties.f.items must be an object"),
        (
            form(type="array", items={"enum": [[1]]}),
            "requestedSchema.properties.f.items.enum must be a list of plain values",
        ),
        (
            form(type="array", items={}, minItems=3, maxItems=1),
            "requestedSchema.properties.f.minItems is greater than maxItems",
        ),
        (
            form(type="object"),
            "requestedSchema.properties.f.type must be one of array, boolean, integer, number, string",
        ),
        (form(type="string", title=None), "requestedSchema.properties.f.title must be a string"),
        ({"type": "object", "properties": {"f": None}}, "requestedSchema.properties.f must be an object"),
        ({"type": "object", "properties": []}, "requestedSchema.properties must be an object"),
        ({"type": "object", "required": "f"}, "requestedSchema.required must be a list of field names"),
        ({"type": "array"}, "requestedSchema.type must be object"),
        ("x", "requestedSchema must be an object"),
    ],
)
def test_a_malformed_schema_is_named_by_its_first_fault(schema: Any, fault: str) -> None:
    assert schema_fault(schema) == fault
