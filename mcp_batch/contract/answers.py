"""Checking a caller's answer against the question it answers: pure functions over the stored question.

An elicitation's content must fit its `requestedSchema` (form mode allows a flat object of strings, numbers,
integers, booleans, enums and arrays of enum strings; form_schema.py refuses any other shape), every bound checked:
lengths, numbers of items, ranges and choices; a sampling request's content must be a message
(`CreateMessageResult`: role, content, model, optional stopReason). A fault names the field, never its value.
"""

from __future__ import annotations

from typing import Any

from mcp_types import CreateMessageResult
from pydantic import ValidationError

from mcp_batch.contract.form_schema import schema_fault
from mcp_batch.errors import InvalidBatch, Problem
from mcp_batch.questions import AnswerAction, InputAnswer, InputKind, InputRequest

_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,)}


def stored_answer(question: InputRequest, answer: InputAnswer) -> dict[str, Any]:
    """What goes back to the backend: {action, content}; InvalidBatch naming every fault of an accept's content."""
    if answer.action is not AnswerAction.accept or question.kind is InputKind.connect:
        return {"action": answer.action.value}  # a URL-mode question's accept carries no content
    if answer.content is None:
        raise InvalidBatch([Problem(("content",), "accept needs content", "missing")])
    if question.kind is InputKind.sampling:
        return {"action": "accept", "content": _message(answer.content)}
    schema = question.params.get("requestedSchema") or {}
    fault = schema_fault(schema)
    if fault is not None:
        msg = f"the backend's schema cannot be answered with accept ({fault}): answer decline or cancel"
        raise InvalidBatch([Problem(("action",), msg, "invalid_schema")])
    problems = form_problems(schema, answer.content)
    if problems:
        raise InvalidBatch(problems)
    return {"action": "accept", "content": answer.content}


def _message(content: dict[str, Any]) -> dict[str, Any]:
    try:
        message = CreateMessageResult.model_validate(content)
    except ValidationError as exc:
        faults = [Problem(("content", *err["loc"]), err["msg"], err["type"]) for err in exc.errors(include_input=False)]
        raise InvalidBatch(faults) from None
    dumped: dict[str, Any] = message.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def form_problems(schema: dict[str, Any], content: dict[str, Any]) -> list[Problem]:
    """The faults of a form's content against its requested schema: unknown fields, missing required ones, and
    values of the wrong type, outside an enum or out of bounds."""
    properties: dict[str, Any] = schema.get("properties") or {}
    problems = [
        Problem(("content", name), "not a field of the requested schema") for name in content if name not in properties
    ]
    for name in schema.get("required") or []:
        if content.get(name) is None:
            problems.append(Problem(("content", name), "required", "missing"))
    for name, value in content.items():
        field = properties.get(name)
        if field is None or value is None:
            continue
        fault = _fault(field, value)
        if fault is not None:
            problems.append(Problem(("content", name), fault))
    return problems


def _choices(field: dict[str, Any]) -> list[Any] | None:
    if "enum" in field:
        return list(field["enum"])
    options = field.get("oneOf") or field.get("anyOf")
    return [option.get("const") for option in options] if options else None


def _fault(field: dict[str, Any], value: Any) -> str | None:
    kind = field.get("type")
    if kind == "array":
        items = field.get("items") or {}
        allowed = _choices(items)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "must be an array of strings"
        if allowed is not None and any(v not in allowed for v in value):
            return "holds a value that is not one of the choices"
        if len(value) < field.get("minItems", 0) or len(value) > field.get("maxItems", len(value)):
            return "has a number of items outside the allowed range"
        return None
    expected = _TYPES.get(str(kind))
    if expected is None:
        return None  # a type form mode does not define: the backend checks it
    if not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool)):
        return f"must be a {kind}"
    allowed = _choices(field)
    if allowed is not None and value not in allowed:
        return "must be one of the choices"
    if isinstance(value, str):
        if len(value) < field.get("minLength", 0) or len(value) > field.get("maxLength", len(value)):
            return "has a length outside the allowed range"
    elif not isinstance(value, bool) and (value < field.get("minimum", value) or value > field.get("maximum", value)):
        return "is outside the allowed range"
    return None
