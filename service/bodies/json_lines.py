"""JSON Lines uploads: `POST /v1/batches` with `Content-Type: application/x-ndjson` (or `application/jsonl`) takes
one call per line and the batch options as query parameters (`?mode=serial&read_only=false`), except those that may
carry a secret: `webhook_url` comes in the `X-MCP-Batch-Webhook-URL` header, since a query string is written to
access logs and spans (a `webhook_url` in the query is a 422 saying so).

The body is read as it streams: each line is parsed strictly (`strict_json.loads`) and checked as a `Call` once it is
complete, so no document of the whole batch is built, and the event loop gets a turn every few hundred lines. Every
problem names its line (`loc: ["line", 3, "server"]`, blank lines counted, 1-based), and so do the whole-batch ones
found afterwards (a duplicate id, a server the key may not call); options name `["query", name]` (or the header).
The parsed calls
then go through the route's usual path (validation, Idempotency-Key, storing), as a JSON body would.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError

from mcp_batch.errors import Forbidden, InvalidBatch, Problem
from mcp_batch.metadata import QUERY_PREFIX
from mcp_batch.models import BatchRequest, Call
from mcp_batch.webhook_urls import URL_HEADER
from service.bodies.strict_json import MalformedJSON, loads
from service.bodies.strict_route import StrictJSONRoute

MEDIA_TYPES = frozenset({"application/x-ndjson", "application/jsonl"})
OPTIONS = tuple(name for name in BatchRequest.model_fields if name != "calls")
IN_HEADERS = {"webhook_url": URL_HEADER}  # options that may carry a secret, and the header each comes in
QUERY_OPTIONS = tuple(name for name in OPTIONS if name not in IN_HEADERS)
MAX_PROBLEMS = 50  # past this many, reading stops: the caller has enough to fix
_TURN_EVERY = 256  # lines parsed between two turns of the event loop
_DEFAULT_DEPTH = 64

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def accepts_json_lines(endpoint: Endpoint) -> Endpoint:
    """Mark a route's endpoint (under `JSONLinesRoute`) as taking a JSON Lines body too."""
    endpoint.accepts_json_lines = True  # type: ignore[attr-defined]
    return endpoint


def is_json_lines(content_type: str | None) -> bool:
    if not content_type:
        return False
    message = Message()
    message["content-type"] = content_type
    return message.get_content_type() in MEDIA_TYPES


@dataclass
class Upload:
    """A parsed upload: the calls, the line each came from, the options of the query; or the problems."""

    calls: list[Call] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def take(self, raw: bytes, number: int, max_depth: int) -> None:
        """One line of the body (blank ones are skipped)."""
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark some editors write
        if not raw.strip():
            return
        try:
            value = loads(raw, max_depth)
        except MalformedJSON as exc:
            self.problems.append(Problem(("line", number), f"not JSON: {exc.msg}", "json_invalid"))
            return
        if not isinstance(value, dict):
            self.problems.append(Problem(("line", number), "expected a JSON object (one call)", "model_type"))
            return
        try:
            call = Call.model_validate(value)
        except ValidationError as exc:
            for e in exc.errors(include_input=False, include_url=False):
                self.problems.append(Problem(("line", number, *e["loc"]), e["msg"], e["type"]))
            return
        self.calls.append(call)
        self.lines.append(number)

    def where(self, problem: Problem) -> Problem:
        """A whole-batch problem of the parsed batch, placed in the upload: its line, or its query parameter."""
        loc = problem.loc[1:] if problem.loc[:1] == ("body",) else problem.loc
        if len(loc) >= 2 and loc[0] == "calls" and isinstance(loc[1], int) and loc[1] < len(self.lines):
            loc = ("line", self.lines[loc[1]], *loc[2:])
        elif loc[:1] == ("calls",):
            loc = ("body", *loc[1:])
        elif len(loc) >= 2 and loc[0] == "metadata":
            loc = ("query", f"{QUERY_PREFIX}{loc[1]}", *loc[2:])
        elif loc and loc[0] in IN_HEADERS:
            loc = ("header", IN_HEADERS[str(loc[0])], *loc[1:])
        elif loc and loc[0] in OPTIONS:
            loc = ("query", *loc)
        return Problem(loc, problem.msg, problem.type)


def _typed(value: str) -> Any:
    """A query value as the JSON value it spells (`true`, `8`, `1.5`), or the string itself: the batch's fields take
    JSON's own types, and a query has only strings."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if isinstance(parsed, bool | int | float | dict) else value  # an object: the `questions` option


def _secret_in_query(name: str) -> Problem:
    msg = f"`{name}` may carry a secret, and a query string is logged: send it in the {IN_HEADERS[name]} header"
    return Problem(("query", name), msg, "secret_in_query")


def _options(request: Request, upload: Upload, own: frozenset[str]) -> None:
    for name, value in request.query_params.multi_items():
        if name in own:  # the route's own parameter (`wait`), not the batch's
            continue
        if name.startswith(QUERY_PREFIX):  # one pair of the batch's `metadata`, its value taken as it is
            pairs = upload.options.setdefault("metadata", {})
            if name.removeprefix(QUERY_PREFIX) in pairs:
                upload.problems.append(Problem(("query", name), "given twice", "value_error"))
            pairs[name.removeprefix(QUERY_PREFIX)] = value
        elif name == "metadata":
            msg = f"give each pair of the batch's metadata as `{QUERY_PREFIX}<key>=<value>`"
            upload.problems.append(Problem(("query", name), msg, "value_error"))
        elif name in IN_HEADERS:
            upload.problems.append(_secret_in_query(name))
        elif name not in OPTIONS:
            upload.problems.append(Problem(("query", name), "not a batch option", "extra_forbidden"))
        elif name in upload.options:
            upload.problems.append(Problem(("query", name), "given twice", "value_error"))
        else:
            upload.options[name] = _typed(value)
    for name, header in IN_HEADERS.items():
        values = request.headers.getlist(header)
        if len(values) > 1:
            upload.problems.append(Problem(("header", header), "given twice", "value_error"))
        elif values:
            upload.options[name] = values[0]
    try:
        BatchRequest.model_validate({"calls": [], **upload.options})
    except ValidationError as exc:
        for e in exc.errors(include_input=False, include_url=False):
            upload.problems.append(upload.where(Problem(tuple(e["loc"]), e["msg"], e["type"])))


async def read_upload(request: Request, max_calls: int, max_depth: int, own: frozenset[str] = frozenset()) -> Upload:
    """The calls of a JSON Lines body, read as it arrives; InvalidBatch names every problem by line. `own`: the
    route's own query parameters, which are not batch options."""
    upload = Upload()
    _options(request, upload, own)
    rest, number, full = b"", 0, False
    async for chunk in request.stream():
        data = rest + chunk
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        for raw in data[:cut].split(b"\n")[:-1]:
            number += 1
            upload.take(raw, number, max_depth)
            full = len(upload.problems) >= MAX_PROBLEMS or len(upload.calls) > max_calls
            if full:
                break
            if number % _TURN_EVERY == 0:
                await asyncio.sleep(0)  # a large upload must not hold every other request up
        if full:
            break
    if rest and not full:
        number += 1
        upload.take(rest, number, max_depth)
    if len(upload.calls) > max_calls:
        msg = f"more than the maximum of {max_calls} calls"
        upload.problems.append(Problem(("line", number), msg, "too_long"))
    elif len(upload.problems) >= MAX_PROBLEMS:
        upload.problems.append(Problem(("line", number), f"reading stopped after {MAX_PROBLEMS} problems"))
    elif not upload.calls and not upload.problems:
        upload.problems.append(Problem(("body",), "a batch needs at least one call: the body holds no line"))
    if upload.problems:
        raise InvalidBatch(upload.problems)
    return upload


class _ParsedRequest(Request):
    """The request as FastAPI's handler reads it: a JSON body, already parsed (the stream was read here)."""

    def __init__(self, request: Request, body: dict[str, Any]) -> None:
        headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
        super().__init__({**request.scope, "headers": [*headers, (b"content-type", b"application/json")]})
        self.parsed = body

    async def body(self) -> bytes:
        return b"{}"  # not empty: FastAPI reads a body's json() only when it has bytes

    async def json(self) -> Any:
        return self.parsed


_OPTION_SCHEMAS: dict[str, dict[str, Any]] = {
    "mode": {"type": "string", "enum": ["concurrent", "serial"]},
    "on_error": {"type": "string", "enum": ["continue", "stop"]},
    "max_concurrency": {"type": "integer", "minimum": 1},
    "read_only": {"type": "boolean"},
    "priority": {"type": "string", "enum": ["low", "normal", "high"]},
    "response_max_bytes": {"type": "integer", "minimum": 1024},
    "deadline_seconds": {"type": "number", "exclusiveMinimum": 0},
    "retention_seconds": {"type": "integer", "minimum": 1},
    "webhook_url": {"type": "string"},
    "questions": {"type": "string", "description": 'The `questions` object as JSON: `{"policy":"ask"}`.'},
}
_LINES = (
    "JSON Lines: one call (a `Call` object) per line; the batch options as query parameters (`webhook_url` in the "
    f"{URL_HEADER} header, each pair of `metadata` as `{QUERY_PREFIX}<key>=<value>`)."
)
OPENAPI: dict[str, Any] = {
    "requestBody": {"content": {media: {"schema": {"type": "string", "description": _LINES}} for media in MEDIA_TYPES}},
    "parameters": [
        {
            "name": IN_HEADERS.get(name, name),  # the header's own spelling
            "in": "header" if name in IN_HEADERS else "query",
            "required": False,
            "schema": _OPTION_SCHEMAS[name],
            "description": f"With a JSON Lines body only: the batch's `{name}` (a JSON body carries its own).",
        }
        for name in OPTIONS
        if name in _OPTION_SCHEMAS  # `metadata` comes as pairs, each a parameter of its own name
    ],
}


def _misplaced(request: Request) -> list[Problem]:
    """The batch options a request with a JSON body gives outside it (in the query, or an upload's header)."""
    where = "the query and these headers take options with a JSON Lines body only"
    msg = f"a batch option goes in the JSON body ({where})"
    named = [name for name in OPTIONS if name in request.query_params]
    named += [name for name in request.query_params if name.startswith(QUERY_PREFIX)]
    misplaced = [Problem(("query", name), msg, "extra_forbidden") for name in named]
    return misplaced + [
        Problem(("header", h), msg, "extra_forbidden") for h in IN_HEADERS.values() if h in request.headers
    ]


class JSONLinesRoute(StrictJSONRoute):
    """StrictJSONRoute, and for an endpoint marked `accepts_json_lines`, JSON Lines bodies too; a JSON body's
    options stay in the body (a batch option in the query is a 422)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        self.takes_lines = getattr(endpoint, "accepts_json_lines", False)
        if self.takes_lines:
            kwargs["openapi_extra"] = {**OPENAPI, **(kwargs.get("openapi_extra") or {})}
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        strict = super().get_route_handler()
        if not self.takes_lines:
            return strict
        plain = APIRoute.get_route_handler(self)  # FastAPI's own, for the body parsed here
        own = frozenset(param.alias for param in self.dependant.query_params)

        async def route(request: Request) -> Response:
            if not is_json_lines(request.headers.get("content-type")):
                misplaced = _misplaced(request)
                if misplaced:
                    raise InvalidBatch(misplaced)
                return await strict(request)
            services = request.app.state.services
            depth = getattr(request.app.state, "max_json_depth", _DEFAULT_DEPTH)
            upload = await read_upload(request, services.settings.max_calls_per_batch, depth, own)
            try:
                return await plain(_ParsedRequest(request, {"calls": upload.calls, **upload.options}))
            except InvalidBatch as exc:
                raise InvalidBatch([upload.where(p) for p in exc.problems]) from None
            except Forbidden as exc:
                raise Forbidden([upload.where(p) for p in exc.problems]) from None

        return route
