"""A backend's questions during a call (elicitation and sampling), as the item's input request, and the answers.

A batch's `questions` setting says what the worker does when a backend asks: `decline` at once (the default), or
`ask` the batch's caller and hold the call open for at most `wait_seconds`. The question, once stored, is the item's
`input_request` and the item's status reads `input_required` until it is answered or the wait runs out.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat

MAX_WAIT_SECONDS = 86_400  # a day: the longest a call may be held open for an answer, whatever a batch asks


class QuestionPolicy(StrEnum):
    """What the worker does when a backend asks a question during a call."""

    decline = "decline"
    ask = "ask"


class QuestionSettings(BaseModel):
    """A batch's `questions` setting."""

    model_config = ConfigDict(extra="forbid")

    policy: QuestionPolicy = Field(
        QuestionPolicy.decline,
        description="`decline`: answer every question `decline` at once (the call goes on without an answer); "
        "`ask`: show it as the item's `input_request` and hold the call open for the caller's answer.",
    )
    wait_seconds: StrictFloat | None = Field(
        None,
        gt=0,
        le=MAX_WAIT_SECONDS,
        description="How long a call is held open for an answer; then the backend is answered `cancel`. Default: "
        "the service's `MCP_BATCH_INPUT_WAIT_SECONDS`.",
    )


class InputKind(StrEnum):
    """What a backend asked for."""

    elicitation = "elicitation"  # elicitation/create, form mode: content the caller fills in
    sampling = "sampling"  # sampling/createMessage: a message from the caller's model (it may cost money)
    connect = "connect"  # elicitation/create, URL mode: open the URL to connect an OAuth backend, then accept


class InputRequest(BaseModel):
    """A question a backend asked during an item's call, waiting for the caller's answer."""

    id: str = Field(description="This question's id (the key of its `inputRequests` entry over MCP tasks).")
    kind: InputKind
    method: str = Field(
        description="The MCP request the backend sent: `elicitation/create` or `sampling/createMessage`."
    )
    params: dict[str, Any] = Field(
        description="The request's params as the backend sent them (its message, its "
        "`requestedSchema`, its sampling messages)."
    )
    asked_at: str = Field(description="When the backend asked (ISO 8601, UTC).")
    expires_at: str = Field(description="When the wait ends and the backend is answered `cancel`.")


class AnswerAction(StrEnum):
    accept = "accept"
    decline = "decline"
    cancel = "cancel"


class InputAnswer(BaseModel):
    """Body of `POST /v1/batches/{id}/items/{item_id}/input`."""

    model_config = ConfigDict(extra="forbid")

    action: AnswerAction = Field(description="`accept` (with `content`), `decline` or `cancel`.")
    content: dict[str, Any] | None = Field(
        None,
        description="With `accept`: for an elicitation, the fields of its `requestedSchema`; for a sampling "
        "request, the message (`role`, `content`, `model`, optional `stopReason`).",
    )
    request_id: str | None = Field(None, max_length=64, description="The question answered (default: the item's).")


class PendingQuestion(BaseModel):
    """An item waiting for an answer."""

    item_id: str
    index: int
    input_request: InputRequest


class PendingQuestions(BaseModel):
    """Answer of `GET /v1/batches/{id}/questions`: the batch's items waiting for an answer, in index order."""

    questions: list[PendingQuestion]


class InputAnswered(BaseModel):
    """Answer of `POST /v1/batches/{id}/items/{item_id}/input`: the answer is on its way to the backend."""

    item_id: str
    request_id: str = Field(description="The question answered.")
    action: AnswerAction
