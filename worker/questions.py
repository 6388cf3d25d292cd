"""A backend's questions during a call, asked of the batch's caller: the worker's side of the item's input request.

A backend asks in one of two ways, and both reach `Seats`, the answerers of one session:
- a server-to-client request during the call (2025-11-25). It arrives on the session's own task, which carries no
  link to the call that caused it (stdio has none on the wire), so it goes to the one call seated on the session;
  with several in flight it cannot be told whose it is and is declined;
- an `input_required` result (2026-07-28): the SDK's Client runs the rounds in the calling item's own task, so the
  item is known exactly (`current`).

With the batch's policy `decline` (the default) the answer is `decline` at once, as it is to an elicitation whose
`requestedSchema` form mode cannot show (contract/form_schema.py). With `ask` the question is stored
(`Store.questions`) and the call held open, its own timeout paused, for at most the batch's wait; the caller's
answer goes back to the backend, or `cancel` once the wait runs out. A question is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson
from mcp.client.session import ClientRequestContext
from mcp_types import CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorData
from pydantic import ValidationError
from redis.exceptions import RedisError

from mcp_batch.backends.asking import refused
from mcp_batch.contract.form_schema import schema_fault
from mcp_batch.questions import InputKind, QuestionPolicy, QuestionSettings
from mcp_batch.records import iso
from mcp_batch.settings import Settings
from mcp_batch.store.questions import Questions

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.25  # how often a waiting call looks for its answer


@dataclass(frozen=True)
class BatchQuestions:
    """What one batch's calls do when asked: its policy and wait, and where questions are stored."""

    store: Questions
    batch_id: str
    policy: QuestionPolicy
    wait_seconds: float
    max_bytes: int


def for_batch(store: Questions, batch_id: str, raw: bytes | None, settings: Settings) -> BatchQuestions:
    """The batch's question settings from its `questions` field as submitted (`raw`: read once per shard job, at its
    start)."""
    chosen = QuestionSettings.model_validate_json(raw) if raw else QuestionSettings()
    wait = chosen.wait_seconds or settings.input_wait_seconds
    return BatchQuestions(store, batch_id, chosen.policy, wait, settings.input_request_max_bytes)


@dataclass(frozen=True)
class Asked:
    """The item whose call runs in this task."""

    batch: BatchQuestions
    index: int


current: ContextVar[Asked | None] = ContextVar("asked_item", default=None)


def bind(batch: BatchQuestions | None, index: int) -> None:
    """The lane's next item: a question its backend asks is this item's."""
    current.set(None if batch is None else Asked(batch, index))


def hold_seconds() -> float:
    """How much longer than its timeout the current call may be held open waiting for an answer (its concurrency
    lease is kept that much longer: the backend still has the call in flight)."""
    asked = current.get()
    return asked.batch.wait_seconds if asked is not None and asked.batch.policy is QuestionPolicy.ask else 0.0


@dataclass
class _Seat:
    asked: Asked | None
    timeout: asyncio.Timeout


class Seats:
    """The calls in flight on one session, and the answerers its client is built with."""

    def __init__(self) -> None:
        self._seated: list[_Seat] = []

    def sit(self, timeout: asyncio.Timeout) -> _Seat:
        """Seat the current call (its timeout paused while a question waits) until `leave`: while it is in flight."""
        seat = _Seat(current.get(), timeout)
        self._seated.append(seat)
        return seat

    def leave(self, seat: _Seat) -> None:
        self._seated.remove(seat)

    @property
    def occupied(self) -> bool:
        return bool(self._seated)

    def _seat(self) -> _Seat | None:
        asked = current.get()
        if asked is not None:  # the call's own task: an input_required round
            return next((seat for seat in self._seated if seat.asked is asked), None)
        return self._seated[0] if len(self._seated) == 1 else None

    async def elicit(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        if params.mode != "form":  # a URL to open is not a question a batch's caller can answer through the service
            return ElicitResult(action="decline")
        fault = schema_fault(params.requested_schema)
        if fault is not None:  # a form that cannot be shown or checked is never asked
            asked = current.get()
            logger.warning("item %s: an elicitation is declined: %s", "?" if asked is None else asked.index, fault)
            return ElicitResult(action="decline")
        answer = await self._ask(InputKind.elicitation, "elicitation/create", _dump(params))
        if answer is None:
            return ElicitResult(action="decline")
        try:
            return ElicitResult.model_validate(answer)
        except ValidationError:
            return ElicitResult(action="cancel")

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | ErrorData:
        answer = await self._ask(InputKind.sampling, "sampling/createMessage", _dump(params))
        if answer is None or answer.get("action") != "accept":
            return refused("decline" if answer is None else str(answer.get("action")))
        try:
            return CreateMessageResult.model_validate(answer.get("content"))
        except ValidationError:
            return refused("cancel")

    async def _ask(self, kind: InputKind, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The caller's answer ({action, content}); None: declined at once (policy, size, no seat, no Redis)."""
        seat = self._seat()
        if seat is None or seat.asked is None or seat.asked.batch.policy is not QuestionPolicy.ask:
            return None
        batch, index = seat.asked.batch, seat.asked.index
        now, question_id = time.time(), secrets.token_hex(8)
        question: dict[str, Any] = {"id": question_id, "kind": kind.value, "method": method, "params": params}
        question |= {"asked_at": iso(now), "expires_at": iso(now + batch.wait_seconds)}
        stored = orjson.dumps(question)
        if len(stored) > batch.max_bytes:
            logger.info("item %d: a %s request of %d bytes is declined (too large)", index, kind.value, len(stored))
            return None
        loop = asyncio.get_running_loop()
        when = seat.timeout.when()
        left = None if when is None else when - loop.time()
        seat.timeout.reschedule(None)  # the wait has its own bound; the call's own time resumes after it
        try:
            await batch.store.ask(batch.batch_id, index, stored, batch.wait_seconds)
            logger.info("item %d: the backend asked (%s); waiting up to %gs", index, kind.value, batch.wait_seconds)
            raw = await answer_to(batch, index, question_id)
        except RedisError as exc:
            logger.warning("item %d: could not store or read a question: %s", index, type(exc).__name__)
            return None
        finally:
            seat.timeout.reschedule(None if left is None else loop.time() + left)
        if raw is None:
            logger.info("item %d: no answer within %gs; the backend is answered cancel", index, batch.wait_seconds)
            return {"action": "cancel"}
        answer: dict[str, Any] = orjson.loads(raw)
        return answer


async def answer_to(batch: BatchQuestions, index: int, question_id: str) -> bytes | None:
    """The answer, or None once the wait runs out (the question withdrawn; an answer that raced it still counts)."""
    deadline = time.monotonic() + batch.wait_seconds
    try:
        while time.monotonic() < deadline:
            found = await batch.store.take(batch.batch_id, index, question_id)
            if found is not None:
                return found
            await asyncio.sleep(min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        return await batch.store.take(batch.batch_id, index, question_id, withdraw=True)
    except asyncio.CancelledError:  # the call was cut (a cancel, a shutdown): the question goes with it
        with contextlib.suppress(RedisError, OSError):
            await asyncio.shield(batch.store.take(batch.batch_id, index, question_id, withdraw=True))
        raise


def _dump(params: ElicitRequestParams | CreateMessageRequestParams) -> dict[str, Any]:
    dumped: dict[str, Any] = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped
