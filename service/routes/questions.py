"""The routes of a backend's questions: the batch's items waiting for an answer, and answering one. Another
tenant's batch answers 404, as a missing one does."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from mcp_batch.models import ErrorDetail
from mcp_batch.questions import InputAnswer, InputAnswered, PendingQuestions
from service.application import questions
from service.auth import AUTH_RESPONSES, CallerDep
from service.bodies import JSONLinesRoute
from service.deps import OwnedBatchId, ServicesDep

router = APIRouter(prefix="/v1", tags=["questions"], route_class=JSONLinesRoute, responses=AUTH_RESPONSES)

_ANSWER_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorDetail, "description": "No such batch (or it expired), or no such item."},
    409: {"model": ErrorDetail, "description": "The item is not waiting for an answer (to that question)."},
}


@router.get(
    "/batches/{batch_id}/questions",
    summary="The batch's items waiting for an answer",
    responses={404: {"model": ErrorDetail, "description": "No such batch (or it expired)."}},
)
async def list_questions(batch_id: OwnedBatchId, services: ServicesDep) -> PendingQuestions:
    """Each item whose backend asked a question and waits for the answer (status `input_required`), with the
    question: its kind, the MCP request's params (the message, the requested schema) and when the wait ends."""
    return await questions.pending(services, batch_id)


# Not `:path`: an id holding '/' is answered with it sent encoded (%2F); GET .../items/{item_id} leaves this path.
@router.post(
    "/batches/{batch_id}/items/{item_id}/input",
    summary="Answer an item's question",
    responses=_ANSWER_RESPONSES,
)
async def answer_question(
    batch_id: str, item_id: str, body: InputAnswer, services: ServicesDep, caller: CallerDep
) -> InputAnswered:
    """Answer the question the item's backend is waiting on: `accept` with `content` (checked against the requested
    schema, or as a sampling message; 422 names each field at fault, never its value), `decline` or `cancel`. The
    answer goes to the backend and the call goes on. A sampling request is answered only by a key with `write`
    (403)."""
    return await questions.answer(services, caller, batch_id, item_id, body)
