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

from pydantic import BaseModel, ConfigDict, Field, create_model

from mcp_batch.models import MAX_DEADLINE_SECONDS, MAX_OFFSET, BatchRequest, BatchStatus, Call, Mode, OnError, Priority
from mcp_batch.questions import QuestionSettings
from mcp_batch.store.idempotency import MAX_KEY_LENGTH

A = TypeVar("A", bound=BaseModel)


def _about(name: str) -> str | None:
    return BatchRequest.model_fields[name].description


BatchIdArg = Annotated[str, Field(description="The `id` of a batch document.")]


class BatchArguments(BaseModel):
    """What a batch tool takes: every option REST's body takes, and the idempotency key REST sends as a header."""

    model_config = ConfigDict(extra="forbid")

    calls: Annotated[list[Call], Field(description="The calls, in order: {id?, server, tool, arguments?} each.")]
    mode: Annotated[Mode, Field(description=_about("mode"))] = Mode.concurrent
    on_error: Annotated[OnError, Field(description=_about("on_error"))] = OnError.continue_
    max_concurrency: Annotated[int | None, Field(ge=1, description=_about("max_concurrency"))] = None
    read_only: Annotated[bool, Field(description=_about("read_only"))] = True
    priority: Annotated[Priority, Field(description=_about("priority"))] = Priority.normal
    response_max_bytes: Annotated[int | None, Field(ge=1024, description=_about("response_max_bytes"))] = None
    deadline_seconds: Annotated[
        float | None, Field(gt=0, le=MAX_DEADLINE_SECONDS, description=_about("deadline_seconds"))
    ] = None
    retention_seconds: Annotated[int | None, Field(ge=1, description=_about("retention_seconds"))] = None
    webhook_url: Annotated[str | None, Field(description=_about("webhook_url"))] = None
    metadata: Annotated[dict[str, str] | None, Field(description=_about("metadata"))] = None
    # None: the door's default (`ask` for a client that took tasks, which can answer; `decline` otherwise)
    questions: Annotated[QuestionSettings | None, Field(description=_about("questions"))] = None
    idempotency_key: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=MAX_KEY_LENGTH,
            description="As REST's Idempotency-Key: the same key again with the same batch answers with the batch the "
            "first call made (nothing new is run); with a different batch it is refused.",
        ),
    ] = None

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
    offset: Annotated[int, Field(ge=0, le=MAX_OFFSET, description="First item of `results` to return.")] = 0
    limit: Annotated[int | None, Field(ge=1, le=10_000, description="Most items of `results` to return.")] = None


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

    status: Annotated[
        list[BatchStatus] | None, Field(description="Only batches in these statuses (any of them); all when left out.")
    ] = None
    limit: Annotated[int, Field(ge=1, le=1000, description="Most batches in one page.")] = 50
    cursor: Annotated[
        str | None, Field(pattern=r"^\d{1,20}$", description="The `next_cursor` of the page before (older batches).")
    ] = None


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
