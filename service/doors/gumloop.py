"""`POST /mcp/tools/call`: Gumloop's synchronous multi-status door onto the same batch queue.

The calls run as one concurrent batch, like any other; this route only speaks Gumloop's shapes. Execution failures
(unknown servers, refused credentials, policy blocks, tool errors, timeouts) are per-result statuses, a tool's own
error in its own words in `error.message`; the top-level status is 400 for a malformed body, 401 and 403 (in
Gumloop's error shape) for a missing key or one that may not make the request, 200 when the outcomes agree, 207
when some succeeded and some failed, and 504 (with the batch's location, so the caller can keep polling) when the
batch outlives the wait.

A key with `write` runs every call; a key without it runs the read-only ones, and the others end blocked
(`error.code` `not_read_only`): Gumloop executes, but what a key may do is the key's.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_batch.errors import Forbidden, InvalidBatch, Problem
from mcp_batch.models import TERMINAL_BATCH, BatchRequest, Call, CallId, ItemResult, ItemStatus, Mode
from mcp_batch.settings import Settings
from service import bodies
from service.application import reading, submitting
from service.auth import AUTH_RESPONSES, CallerDep
from service.deps import ServicesDep

PATH = "/mcp/tools/call"

router = APIRouter(tags=["gumloop"], responses=AUTH_RESPONSES)


class GumloopCall(BaseModel):
    """One tool call in Gumloop's request."""

    model_config = ConfigDict(extra="forbid")

    ref: CallId = Field(  # it becomes the item's id
        None,
        description="Caller's identifier, echoed on the matching result; unique. Default: the call's zero-based "
        "index in `calls`, as a string.",
    )
    server_id: str = Field(min_length=1, max_length=200, description="Backend name from the servers file.")
    tool_name: str = Field(min_length=1, max_length=200, description="Tool to call on that backend.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The tool's arguments (default `{}`), checked by the tool's input schema."
    )


class GumloopRequest(BaseModel):
    """Body of `POST /mcp/tools/call`."""

    model_config = ConfigDict(extra="forbid")

    calls: list[GumloopCall] = Field(
        min_length=1,
        description="The calls, run concurrently; at least 1, at most `gumloop_max_calls` (default 5).",
        json_schema_extra={"maxItems": Settings.model_fields["gumloop_max_calls"].default},  # the default's
    )
    team_id: str | None = Field(None, description="Team the calls are scoped to: must be the key's tenant.")


class GumloopStatus(StrEnum):
    """A result's outcome, in Gumloop's words."""

    success = "success"
    unauthenticated = "unauthenticated"
    error = "error"


class GumloopError(BaseModel):
    """Why a call (or the request) failed; never repeats argument values."""

    code: str = Field(description="Machine-readable cause, e.g. invalid_request, tool_error, unknown_server.")
    message: str = Field(description="Human-readable explanation.")
    type: str = Field(description="Error family, e.g. invalid_request_error, tool, backend, timeout_error.")
    param: str | None = Field(None, description="The offending field, dotted (`calls.2.tool_name`), when known.")
    details: dict[str, Any] | None = Field(None, description="Extra structured facts (never argument values).")


class GumloopResult(BaseModel):
    """One call's outcome, in call order."""

    ref: str = Field(description="The call's ref (its index when it gave none).")
    server_id: str | None = Field(description="The call's server_id.")
    tool_name: str | None = Field(description="The call's tool_name.")
    status: GumloopStatus = Field(
        description="`success`, `unauthenticated` (the backend refused its credentials), or `error`."
    )
    content: list[dict[str, Any]] | None = Field(description="The tool's MCP content blocks, on success.")
    error: GumloopError | None = Field(
        description="Why the call did not succeed; null on success. A tool's own error has its first text block (at "
        "most 500 characters) as `message`."
    )
    meta: dict[str, Any] | None = Field(
        None, description="The tool result's own `_meta` (runtime metadata of the tool); left out when it sent none."
    )


class GumloopResponse(BaseModel):
    """Body of a 200 or 207 answer."""

    results: list[GumloopResult] = Field(description="One result per call, in call order.")


class GumloopErrorResponse(BaseModel):
    """Body of a 400, 401 or 403 answer."""

    error: GumloopError = Field(description="The first fault; `details.problems` lists every one.")


class GumloopTimeoutResponse(BaseModel):
    """Body of a 504 answer: the batch goes on and can be polled."""

    error: GumloopError = Field(description="code `timeout`.")
    batch_id: str = Field(description="The batch the calls run in.")
    location: str = Field(description="Where to poll it: `GET /v1/batches/{id}?wait=S`.")


# The batch contract's field names as this route's callers know them (problems from submit name the former).
_PARAM_NAMES = {"id": "ref", "server": "server_id", "tool": "tool_name"}
_NO_ERROR_MESSAGES = {
    ItemStatus.skipped: "the call was skipped: the batch stopped before it started",
    ItemStatus.blocked: "the call was blocked by policy",
}


def parse_request(
    body: bytes, max_calls: int, max_depth: int = 64, pause: Callable[[], None] | None = None
) -> GumloopRequest:
    """The validated body, or InvalidBatch listing every fault by location (never by submitted value). `pause`: see
    `bodies.loads`."""
    try:
        data = bodies.loads(body, max_depth, pause)
    except bodies.MalformedJSON as exc:
        raise InvalidBatch([Problem((), f"the body is not valid JSON: {exc.msg}", "json_invalid")]) from None
    problems: list[Problem] = []
    calls = data.get("calls") if isinstance(data, dict) else None
    if isinstance(calls, list) and len(calls) > max_calls:
        problems.append(Problem(("calls",), f"{len(calls)} calls, more than the maximum of {max_calls}", "too_long"))
        data = {**data, "calls": calls[:max_calls]}  # refused already: the calls past the maximum are not validated
    try:
        request = GumloopRequest.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        problems += [Problem(tuple(e["loc"]), e["msg"], e["type"]) for e in errors]
    else:
        seen: dict[str, int] = {}
        for index, call in enumerate(request.calls):
            ref = call.ref if call.ref is not None else str(index)
            if ref in seen:
                problems.append(
                    Problem(("calls", index, "ref"), f"duplicate ref: call {index} has the ref of call {seen[ref]}")
                )
            seen.setdefault(ref, index)
    if problems:
        raise InvalidBatch(problems)
    return request


def to_batch(request: GumloopRequest, read_only: bool = False) -> BatchRequest:
    """One concurrent batch; `read_only` for a key that may not run write tools (those calls end blocked)."""
    calls = [
        Call(id=c.ref if c.ref is not None else str(i), server=c.server_id, tool=c.tool_name, arguments=c.arguments)
        for i, c in enumerate(request.calls)
    ]
    return BatchRequest(calls=calls, mode=Mode.concurrent, read_only=read_only)


def to_result(item: ItemResult) -> GumloopResult:
    """A finished batch item as Gumloop's result."""
    fields: dict[str, Any] = {"ref": item.id, "server_id": item.server, "tool_name": item.tool}
    fields["meta"] = item.meta
    if item.status == ItemStatus.ok:
        return GumloopResult(**fields, status=GumloopStatus.success, content=item.content, error=None)
    if item.error is None:  # skipped and blocked items carry no error object of their own
        message = _NO_ERROR_MESSAGES.get(item.status, f"the call ended {item.status.value}")
        error = GumloopError(code=item.status.value, message=message, type="batch")
    else:
        param = (item.error.details or {}).get("param")
        error = GumloopError(
            code=item.error.code,
            message=item.error.message,
            type=item.error.type,
            param=param if isinstance(param, str) else None,
            details=item.error.details,
        )
    status = GumloopStatus.unauthenticated if error.code == "backend_unauthenticated" else GumloopStatus.error
    return GumloopResult(**fields, status=status, content=None, error=error)


def status_code(results: list[GumloopResult]) -> int:
    """207 when some calls succeeded and some did not; 200 when all did, or none did (Gumloop's contract)."""
    outcomes = {result.status == GumloopStatus.success for result in results}
    return 207 if len(outcomes) > 1 else 200


def _refused(problems: list[Problem], status: int = 400) -> JSONResponse:
    """A 400 (malformed body) or 403 (the key may not) in Gumloop's error shape, every problem listed."""
    listed = [{"param": _param(p.loc), "message": p.msg, "type": p.type} for p in problems]
    first = listed[0]
    message = f"{first['param']}: {first['message']}" if first["param"] else str(first["message"])
    if len(listed) > 1:
        message += f" (and {len(listed) - 1} more)"
    code, kind = ("forbidden", "permission_error") if status == 403 else ("invalid_request", "invalid_request_error")
    error = GumloopError(code=code, message=message, type=kind, param=first["param"], details={"problems": listed})
    return JSONResponse(GumloopErrorResponse(error=error).model_dump(mode="json"), status_code=status)


def refusal(status: int, message: str, challenge: str) -> JSONResponse:
    """The sign-in's 401 or 403 (service/auth.py), in Gumloop's error shape."""
    code, kind = ("unauthenticated", "authentication_error") if status == 401 else ("forbidden", "permission_error")
    body = GumloopErrorResponse(error=GumloopError(code=code, message=message, type=kind)).model_dump(mode="json")
    return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": challenge})


def _param(loc: tuple[str | int, ...]) -> str | None:
    parts = list(loc)
    if len(parts) > 2 and parts[0] == "calls" and isinstance(parts[2], str):
        parts[2] = _PARAM_NAMES.get(parts[2], parts[2])
    return ".".join(map(str, parts)) or None


def _timed_out(batch_id: str, waited: float) -> JSONResponse:
    location = f"/v1/batches/{batch_id}"
    error = GumloopError(
        code="timeout",
        message=f"the calls did not all finish within {waited:g}s; they go on running: poll the location",
        type="timeout_error",
        details={"batch_id": batch_id, "wait_seconds": waited},
    )
    body = GumloopTimeoutResponse(error=error, batch_id=batch_id, location=location)
    return JSONResponse(body.model_dump(mode="json"), status_code=504, headers={"Location": location})


def _inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    # The body is read raw (so a malformed one is our 400, not FastAPI's 422), hence FastAPI does not register the
    # model's schema; inline its $defs into the operation instead.
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(value) for value in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


_REQUEST_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inline_schema(GumloopRequest)}},
    }
}


@router.post(
    PATH,
    summary="Call a few MCP tools at once and wait for their results (Gumloop-compatible)",
    response_model=GumloopResponse,
    response_description="Every call succeeded, or every call failed: inspect each result's status and error.",
    responses={
        207: {"model": GumloopResponse, "description": "Some calls succeeded and some failed."},
        400: {"model": GumloopErrorResponse, "description": "Malformed body; nothing was run."},
        401: {"model": GumloopErrorResponse, "description": "No API key or access token, or one that is not valid."},
        403: {
            "model": GumloopErrorResponse,
            "description": "The key may not call a server named, or `team_id` is not its tenant; nothing was run.",
        },
        504: {
            "model": GumloopTimeoutResponse,
            "description": "The calls outlived the wait; the batch goes on at its location.",
            "headers": {"Location": {"description": "The batch: `/v1/batches/{id}`.", "schema": {"type": "string"}}},
        },
    },
    openapi_extra=_REQUEST_BODY,
)
async def call_tools(request: Request, services: ServicesDep, caller: CallerDep) -> JSONResponse:
    """Run the calls as one concurrent batch and answer with every result once it completes.

    `team_id`, when given, must be the tenant of the caller's key (403 otherwise; with auth off it is not checked).
    A key without `write` runs only the read-only calls; the others end `error` with code `not_read_only`.
    """
    try:
        settings = services.settings
        raw = await request.body()
        max_calls, depth = settings.gumloop_max_calls, settings.max_json_depth
        body = await bodies.off_loop_if_large(len(raw), lambda pause: parse_request(raw, max_calls, depth, pause))
        if caller.keyed and body.team_id is not None and body.team_id != caller.tenant:
            raise Forbidden([Problem(("team_id",), "the team is not this key's tenant", "forbidden")])
        batch_id = (await submitting.submit(services, to_batch(body, read_only=not caller.write), caller)).batch_id
    except InvalidBatch as exc:
        return _refused(exc.problems)
    except Forbidden as exc:
        return _refused(exc.problems, 403)
    waited = services.settings.sync_wait_seconds
    document = await reading.read(services, batch_id, waited)  # the byte budget and the deadline, as on every door
    if document.status not in TERMINAL_BATCH:
        return _timed_out(batch_id, waited)
    results = [to_result(item) for item in document.results]
    answer = GumloopResponse(results=results).model_dump(mode="json")
    for result in answer["results"]:
        if result["meta"] is None:  # Gumloop's own fields only, unless the tool sent metadata
            del result["meta"]
    return JSONResponse(answer, status_code=status_code(results))
