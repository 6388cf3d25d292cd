"""An answer checked against its question, without Redis: every fault named by its field, never by its value."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_batch.contract.answers import form_problems, stored_answer
from mcp_batch.errors import InvalidBatch
from mcp_batch.questions import InputAnswer, InputRequest

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0},
        "ok": {"type": "boolean"},
        "pet": {"type": "string", "enum": ["cat", "dog"]},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
        "tools": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
    "required": ["name"],
}


def question(kind: str = "elicitation") -> InputRequest:
    method = "elicitation/create" if kind == "elicitation" else "sampling/createMessage"
    params = {"requestedSchema": SCHEMA} if kind == "elicitation" else {"messages": []}
    return InputRequest(id="q", kind=kind, method=method, params=params, asked_at="x", expires_at="y")  # type: ignore[arg-type]


def test_content_that_fits_the_schema_passes_as_it_is() -> None:
    content = {"name": "Ada", "age": 36, "ok": True, "pet": "cat", "hero": "h1", "tools": ["a"]}
    assert form_problems(SCHEMA, content) == []
    assert stored_answer(question(), InputAnswer(action="accept", content=content)) == {  # type: ignore[arg-type]
        "action": "accept",
        "content": content,
    }


def test_each_fault_names_its_field_and_never_its_value() -> None:
    content = {"name": "secret-too-long", "age": True, "pet": "fish", "hero": "h9", "tools": ["c"], "extra": 1}
    faults = {p.loc: p.msg for p in form_problems(SCHEMA, content)}
    assert set(faults) == {("content", f) for f in ("name", "age", "pet", "hero", "tools", "extra")}
    assert all("secret" not in msg and "fish" not in msg for msg in faults.values())
    assert form_problems(SCHEMA, {}) == form_problems(SCHEMA, {"name": None})  # required, either way


def test_decline_and_cancel_carry_no_content_and_accept_needs_some() -> None:
    assert stored_answer(question(), InputAnswer(action="decline", content={"x": 1})) == {"action": "decline"}  # type: ignore[arg-type]
    with pytest.raises(InvalidBatch) as missing:
        stored_answer(question(), InputAnswer(action="accept"))  # type: ignore[arg-type]
    assert missing.value.problems[0].loc == ("content",)


def test_a_sampling_answer_is_a_message() -> None:
    message = {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}
    assert stored_answer(question("sampling"), InputAnswer(action="accept", content=message))["content"] == message  # type: ignore[arg-type]
    with pytest.raises(InvalidBatch) as refused:
        stored_answer(question("sampling"), InputAnswer(action="accept", content={"role": "robot"}))  # type: ignore[arg-type]
    assert {p.loc[:2] for p in refused.value.problems} >= {("content", "role"), ("content", "content")}


def test_every_bound_is_checked_lengths_items_ranges_and_choices() -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "minLength": 2, "maxLength": 3},
            "score": {"type": "number", "minimum": 0.5, "maximum": 1},
            "tags": {
                "type": "array",
                "items": {"anyOf": [{"const": "a"}, {"const": "b"}]},
                "minItems": 1,
                "maxItems": 1,
            },
            "size": {"type": "integer", "enum": [1, 2]},
        },
    }
    assert form_problems(schema, {"code": "ab", "score": 1, "tags": ["a"], "size": 2}) == []
    faults = {p.loc[1]: p.msg for p in form_problems(schema, {"code": "a", "score": 0.4, "tags": [], "size": 3})}
    assert faults == {
        "code": "has a length outside the allowed range",
        "score": "is outside the allowed range",
        "tags": "has a number of items outside the allowed range",
        "size": "must be one of the choices",
    }
    assert {p.loc[1] for p in form_problems(schema, {"code": "abcd", "score": 2, "tags": ["a", "b"]})} == {
        "code",
        "score",
        "tags",
    }


@pytest.mark.parametrize(
    "field",
    [{"type": "integer", "minimum": "5"}, {"type": "string", "enum": 5}, {"type": "string", "oneOf": ["x"]}],
)
def test_an_accept_of_a_question_whose_schema_is_malformed_is_refused_naming_the_fault(field: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"f": field}}
    bad = InputRequest(
        id="q",
        kind="elicitation",
        method="elicitation/create",
        params={"requestedSchema": schema},
        asked_at="x",
        expires_at="y",  # type: ignore[arg-type]
    )
    with pytest.raises(InvalidBatch) as refused:
        stored_answer(bad, InputAnswer(action="accept", content={"f": 5}))  # type: ignore[arg-type]
    assert refused.value.problems[0].loc == ("action",)
    assert "requestedSchema.properties.f" in refused.value.problems[0].msg
    assert stored_answer(bad, InputAnswer(action="decline")) == {"action": "decline"}  # type: ignore[arg-type]
