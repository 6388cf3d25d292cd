"""The MCP door's tool arguments: one pydantic model per tool, whose fields are the tool's flat arguments.

The SDK reads a tool's input schema from its function's signature. `tool_function` gives a function the fields of
its model as its signature (`__signature__`, which `inspect.signature` honours), so the schema is the model's field
for field, and the tool body gets its arguments as one instance of the model, validated once by the SDK.
`submit_batch` and `call_tools_batch` share `BatchArguments`; the waits' descriptions state the configured limits,
so their models are completed per server (`configured`).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from mcp_batch.models import MAX_DEADLINE_SECONDS, MAX_OFFSET, BatchRequest, BatchStatus, Call, Mode, OnError, Priority
from mcp_batch.questions import QuestionSettings
from mcp_batch.store.idempotency import MAX_KEY_LENGTH

A = TypeVar("A", bound=BaseModel)


BatchIdArg = Annotated[str, Field(description="A batch's `id`.")]

# A call as the schema shows it: what a model fills in, in the fewest words (the `Call` model still validates it
# whole: its bounds and id pattern are stated in the errors it names).
_CALL_SCHEMA = {
    "type": "object",
    "required": ["server", "tool"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "description": "Unique in the batch; default: its index."},
        "server": {"type": "string", "description": "A backend (list_servers)."},
        "tool": {"type": "string"},
        "arguments": {"type": "object"},
        "timeout_seconds": {"type": "number", "exclusiveMinimum": 0},
        "cursor": {"type": "string", "description": "A truncated item's next_cursor: its next page."},
    },
}
_QUESTIONS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"policy": {"enum": ["decline", "ask"]}, "wait_seconds": {"type": "number", "exclusiveMinimum": 0}},
    "description": "A backend's question: `decline` it, or `ask` the task client (the call waits up to wait_seconds).",
}


class BatchArguments(BaseModel):
    """What a batch tool takes: every option REST's body takes, and the idempotency key REST sends as a header."""

    model_config = ConfigDict(extra="forbid")

    calls: Annotated[list[Call], WithJsonSchema({"type": "array", "items": _CALL_SCHEMA})]
    # Options the tool's description explains, or whose names do, go without a description of their own.
    mode: Mode = Mode.concurrent
    on_error: OnError = OnError.continue_
    max_concurrency: Annotated[int | None, Field(ge=1)] = None
    read_only: bool = True
    priority: Annotated[Priority, Field(description="Against the caller's other batches.")] = Priority.normal
    response_max_bytes: Annotated[int | None, Field(ge=1024, description="Budget of the answer's results.")] = None
    deadline_seconds: Annotated[float | None, Field(gt=0, le=MAX_DEADLINE_SECONDS)] = None
    retention_seconds: Annotated[int | None, Field(ge=1, description="Kept this long once ended.")] = None
    webhook_url: Annotated[str | None, Field(description="POSTed a signed summary at the end.")] = None
    metadata: dict[str, str] | None = None
    # None: the door's default (`ask` for a client that took tasks, which can answer; `decline` otherwise)
    questions: Annotated[QuestionSettings | None, WithJsonSchema(_QUESTIONS_SCHEMA)] = None
    idempotency_key: Annotated[
        str | None,
        Field(min_length=1, max_length=MAX_KEY_LENGTH, description="Again with the same batch: the first's answer."),
    ] = None
    verbose: Annotated[bool, Field(description="Add options, times, and calls' timings, worker, seq.")] = False

    def request(self) -> BatchRequest:
        """The batch these arguments ask for, as POST /v1/batches would take it."""
        options = {name: getattr(self, name) for name in BatchRequest.model_fields if name in type(self).model_fields}
        return BatchRequest(**options)  # the calls as they are: a model's instances are not validated again


class CallArguments(BatchArguments):
    """call_tools_batch's: a batch's, and how long to wait for it (`configured`: at most the synchronous wait)."""

    wait_seconds: float = 0


class _Reading(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GetBatchArguments(_Reading):
    """get_batch's: the batch, how long to wait for its end (`configured`: at most the longest wait), one page."""

    batch_id: BatchIdArg
    wait_seconds: float = 0
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET, description="The first call's index in `results`.")] = 0
    limit: Annotated[int | None, Field(ge=1, le=10_000, description="Most calls in `results`.")] = None
    verbose: Annotated[bool, Field(description=BatchArguments.model_fields["verbose"].description)] = False


def configured(model: type[A], description: str, default: float) -> type[A]:
    """`model` with its `wait_seconds` described as the settings bound it, and their default."""
    wait = Field(ge=0, description=description)
    return create_model(model.__name__, __base__=model, wait_seconds=(Annotated[float, wait], default))


class DeleteBatchArguments(_Reading):
    """delete_batch's: the ended batch to delete."""

    batch_id: BatchIdArg


class GetItemArguments(_Reading):
    """get_item's: one item of a batch, and where in its content to start."""

    batch_id: BatchIdArg
    item_id: Annotated[str, Field(min_length=1, description="The item's `id` (its call's id, or its index).")]
    cursor: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=500,
            pattern=r"^[A-Za-z0-9_-]+$",
            description="The `next_cursor` of a truncated copy of this item, or of the page before.",
        ),
    ] = None


class ListBatchesArguments(_Reading):
    """list_batches': which of the caller's batches, and where the page starts."""

    status: Annotated[list[BatchStatus] | None, Field(description="Only these.")] = None
    limit: Annotated[int, Field(ge=1, le=1000)] = 50
    cursor: Annotated[str | None, Field(pattern=r"^\d{1,20}$", description="The page before's `next_cursor`.")] = None


class NoArguments(_Reading):
    """A tool that takes none."""


def tool_function(name: str, model: type[A], run: Callable[[A], Awaitable[Any]], returns: Any) -> Callable[..., Any]:
    """A tool function named `name` whose signature is `model`'s fields (keyword arguments) and `returns`, which
    hands `run` its arguments as one instance of `model`."""

    async def tool(**arguments: Any) -> Any:
        return await run(model.model_construct(**arguments))  # validated already, by the SDK, against these fields

    parameters = [
        inspect.Parameter(
            field_name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if field.is_required() else field.default,
            annotation=Annotated[field.annotation, field],
        )
        for field_name, field in model.model_fields.items()
    ]
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
    return tool
