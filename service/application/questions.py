"""Use cases of a backend's questions: the items waiting for an answer (as every door shows them) and answering one.

Only the batch's tenant sees or answers its questions (`owned`); a sampling request, which may cost money, is
answered only by a key with `write`. A question counts while its item runs (no result yet, the batch not ended) and
its wait has not run out: one a stopped worker left behind is not shown once its wait is over.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import orjson

from mcp_batch.contract.answers import stored_answer
from mcp_batch.errors import Conflict, Forbidden, InvalidBatch, Problem
from mcp_batch.models import TERMINAL_BATCH, BatchDocument, BatchRequest, ItemPage, ItemStatus
from mcp_batch.questions import (
    AnswerAction,
    InputAnswer,
    InputAnswered,
    InputKind,
    InputRequest,
    PendingQuestion,
    PendingQuestions,
    QuestionPolicy,
    QuestionSettings,
)
from mcp_batch.store import Store
from mcp_batch.tenants import Caller
from service.application.services import Services, owned

# Set by a door whose caller can see and answer a question while its batch runs (an MCP client that took tasks):
# its batches ask by default. Every other caller's decline at once, so no call is held open for an answer nobody
# will give (holding its backend's concurrency lease all the while).
answerable: ContextVar[bool] = ContextVar("caller_can_answer", default=False)


def defaulted(request: BatchRequest) -> BatchRequest:
    """The request with the `questions` setting its caller gets when it sets none."""
    if request.questions is not None or not answerable.get():
        return request
    return request.model_copy(update={"questions": QuestionSettings(policy=QuestionPolicy.ask)})


async def waiting(services: Services, batch_id: str) -> dict[int, tuple[str, InputRequest]]:
    """The batch's items waiting for an answer: index -> (item id, question), in index order."""
    return await waiting_in(services.store, batch_id)


async def waiting_in(store: Store, batch_id: str) -> dict[int, tuple[str, InputRequest]]:
    """`waiting`, from the store alone."""
    now = time.time()
    found: dict[int, tuple[str, InputRequest]] = {}
    for index, raw in sorted((await store.questions.waiting(batch_id)).items()):
        question = InputRequest.model_validate_json(raw)
        if datetime.fromisoformat(question.expires_at).timestamp() <= now:
            continue
        read = await store.reads.at(batch_id, index)
        if read is not None and read.record is None and read.row.status not in TERMINAL_BATCH:
            found[index] = (read.head["id"], question)
    return found


async def pending(services: Services, batch_id: str) -> PendingQuestions:
    """The owned batch's items waiting for an answer."""
    found = await waiting(services, batch_id)
    listed = [PendingQuestion(item_id=item_id, index=i, input_request=q) for i, (item_id, q) in found.items()]
    return PendingQuestions(questions=listed)


async def with_questions(services: Services, document: BatchDocument) -> BatchDocument:
    """The document with its waiting items as `input_required` (counted apart from `running`)."""
    if document.counts.running == 0:
        return document  # nothing runs, so nothing waits: no read
    found = await waiting(services, document.id)
    if not found:
        return document
    running = document.counts.running - len(found)
    counts = document.counts.model_copy(update={"running": running, "input_required": len(found)})
    results = [
        item.model_copy(update={"status": ItemStatus.input_required, "input_request": found[item.index][1]})
        if item.index in found and item.status is ItemStatus.running
        else item
        for item in document.results
    ]
    return document.model_copy(update={"counts": counts, "results": results})


async def item_with_question(services: Services, batch_id: str, item: ItemPage) -> ItemPage:
    """The item as `input_required` with its question, when it waits for an answer."""
    if item.status is not ItemStatus.running:
        return item
    found = (await waiting(services, batch_id)).get(item.index)
    if found is None:
        return item
    return item.model_copy(update={"status": ItemStatus.input_required, "input_request": found[1]})


async def answer(services: Services, caller: Caller, batch_id: str, item_id: str, given: InputAnswer) -> InputAnswered:
    """Answer the item's waiting question: Conflict when it waits for none (or for another than `request_id`),
    Forbidden for a sampling request and a key without `write`, InvalidBatch naming each fault of the content."""
    batch_id = await owned(services, batch_id, caller)
    located = await services.store.reads.located(batch_id, item_id)
    index = located.head["index"]
    found = (await waiting(services, batch_id)).get(index)
    if found is None or (given.request_id is not None and given.request_id != found[1].id):
        raise Conflict(f"item {item_id!r} is not waiting for an answer to that question")
    return await _answer(services, caller, batch_id, index, item_id, found[1], given)


async def _answer(
    services: Services,
    caller: Caller,
    batch_id: str,
    index: int,
    item_id: str,
    question: InputRequest,
    given: InputAnswer,
) -> InputAnswered:
    if question.kind is InputKind.sampling and not caller.write:
        msg = "this key may not answer a sampling request (it may cost money): a key with write may"
        raise Forbidden([Problem(("action",), msg, "forbidden")])
    stored = orjson.dumps(stored_answer(question, given))
    cap = services.settings.max_argument_bytes
    if len(stored) > cap:  # it goes to the backend as a call's arguments do, so it is held to their cap
        msg = f"the answer is {len(stored)} bytes; at most {cap} (MCP_BATCH_MAX_ARGUMENT_BYTES) go to a backend"
        raise InvalidBatch([Problem(("content",), msg, "too_large")])
    wait = max(1.0, datetime.fromisoformat(question.expires_at).timestamp() - time.time())
    if not await services.store.questions.answer(batch_id, index, question.id, stored, wait, caller.tenant):
        raise Conflict(f"item {item_id!r} is not waiting for an answer to that question")
    return InputAnswered(item_id=item_id, request_id=question.id, action=given.action)


async def answer_responses(services: Services, caller: Caller, batch_id: str, responses: dict[str, Any]) -> None:
    """Answer questions by their ids (MCP's `tasks/update` `inputResponses`): each response an ElicitResult
    ({action, content}) or, for a sampling request, the message itself (an accept). A key that names no waiting
    question is passed over (it was answered, or its wait ran out); InvalidBatch names the key and field of a
    response that does not fit its question, the others being answered."""
    batch_id = await owned(services, batch_id, caller)
    by_id = {
        question.id: (index, item_id, question)
        for index, (item_id, question) in (await waiting(services, batch_id)).items()
    }
    problems: list[Problem] = []
    for key, response in responses.items():
        if key not in by_id:
            continue
        if not isinstance(response, dict):
            problems.append(Problem(("inputResponses", key), "must be an object"))
            continue
        index, item_id, question = by_id[key]
        given = _as_answer(question, response)
        if given is None:
            problems.append(Problem(("inputResponses", key, "action"), "must be accept, decline or cancel"))
            continue
        try:
            await _answer(services, caller, batch_id, index, item_id, question, given)
        except InvalidBatch as exc:
            problems += [Problem(("inputResponses", key, *p.loc), p.msg, p.type) for p in exc.problems]
        except Conflict:
            continue  # answered meanwhile, or its wait ran out
    if problems:
        raise InvalidBatch(problems)


def _as_answer(question: InputRequest, response: dict[str, Any]) -> InputAnswer | None:
    action = response.get("action")
    if question.kind is InputKind.sampling and action is None:
        return InputAnswer(action=AnswerAction.accept, content=response)
    if action not in set(AnswerAction):
        return None
    content = response.get("content")
    return InputAnswer(action=AnswerAction(action), content=content if isinstance(content, dict) else None)
