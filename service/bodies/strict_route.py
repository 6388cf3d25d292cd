"""Routes whose JSON bodies are parsed strictly (`strict_json.loads`) and must say they are JSON.

A route with a body answers 415 to a body sent as anything but `application/json` (or `+json`), a missing
Content-Type included, rather than handing the raw bytes to validation; a JSON body it cannot take (see
`strict_json.loads`) is a 422 `json_invalid` naming what is wrong. Neither ever quotes the body.

The body reaches FastAPI through its public customization points: an `APIRoute` subclass whose handler hands FastAPI a
`Request` subclass with its own `json()`. What the route takes (its query parameters, its body's model) is read from
its dependency tree by `service/route_tree.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from email.message import Message
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel

from mcp_batch.models import ErrorDetail
from mcp_batch.settings import Settings
from service import route_tree
from service.bodies.off_loop import OFF_LOOP_BYTES, InvalidBody, collector_paused, drain, parse
from service.bodies.strict_json import MalformedJSON, loads

_DEFAULT_DEPTH = Settings.model_fields["max_json_depth"].default

UNSUPPORTED_MEDIA_TYPE = "the body must be JSON, sent with Content-Type: application/json"


_UNREAD = object()


Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


class StrictJSONRequest(Request):
    """A request whose `json()` is `strict_json.loads`, its failures reported as decode errors (FastAPI's 422), or
    the value a parse off the event loop handed in (`parsed`)."""

    parsed: Any = _UNREAD

    async def json(self) -> Any:
        if self.parsed is _UNREAD:
            max_depth = getattr(self.app.state, "max_json_depth", _DEFAULT_DEPTH)
            try:
                self.parsed = loads(await self.body(), max_depth)
            except MalformedJSON as exc:
                raise json.JSONDecodeError(exc.msg, "", exc.pos) from None
        return self.parsed


def is_json(content_type: str | None) -> bool:
    """`application/json`, or any `application/...+json`, whatever its parameters."""
    if not content_type:
        return False
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def has_body(request: Request) -> bool:
    """The request announces a body (a Content-Length above 0, or a chunked one)."""
    length = request.headers.get("content-length")
    return (length is not None and length.strip() not in ("", "0")) or "transfer-encoding" in request.headers


def takes_query_prefix(prefix: str) -> Callable[[Endpoint], Endpoint]:
    """Mark a route's endpoint as taking query parameters named `<prefix><anything>` (it reads them itself)."""

    def mark(endpoint: Endpoint) -> Endpoint:
        endpoint.query_prefix = prefix  # type: ignore[attr-defined]
        return endpoint

    return mark


class StrictJSONRoute(APIRoute):
    """An APIRoute that parses its JSON body with `strict_json.loads` and answers 415 to a body that is not JSON."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if route_tree.takes_body(self):  # a copy: the responses given may be shared by other routes
            refusal = {"model": ErrorDetail, "description": UNSUPPORTED_MEDIA_TYPE.capitalize()}
            self.responses = {415: refusal, **self.responses}

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = route_tree.takes_body(self)
        model = route_tree.body_model(self)
        known = route_tree.query_names(self)
        prefix = getattr(self.endpoint, "query_prefix", None)

        async def strict(request: Request) -> Response:
            if takes_body and has_body(request) and not is_json(request.headers.get("content-type")):
                return JSONResponse({"detail": UNSUPPORTED_MEDIA_TYPE}, status_code=415)
            unknown = sorted(n for n in set(request.query_params) - known if not (prefix and n.startswith(prefix)))
            if unknown:  # as bodies refuse unknown fields (a misspelt `limt=` is not silently ignored)
                detail = [
                    {"loc": ["query", n], "msg": "an unknown query parameter", "type": "extra_forbidden"}
                    for n in unknown
                ]
                return JSONResponse({"detail": detail[:20]}, status_code=422)
            strict_request = StrictJSONRequest(request.scope, request.receive)
            if model is None or not has_body(request):
                return await handler(strict_request)
            body = await strict_request.body()
            if len(body) <= OFF_LOOP_BYTES:
                return await handler(strict_request)
            with collector_paused():
                strict_request.parsed = await _parse_off_loop(strict_request, body, model)
                try:
                    return await handler(strict_request)
                finally:  # the answer is made: free the request's model off the loop, before it is dropped here
                    await asyncio.to_thread(drain, strict_request.parsed)

        return strict


async def _parse_off_loop(request: Request, body: bytes, model: type[BaseModel]) -> BaseModel:
    """The body parsed and validated in a worker thread (see off_loop), its faults the 422 FastAPI would give.

    The validated instance then goes to FastAPI as the parsed body, which passes a model instance through its own
    validation as it is (pydantic does not revalidate instances); tests/service/bodies/test_off_loop.py fails if that
    changes (the model would be validated twice, the second time on the event loop)."""
    max_depth = getattr(request.app.state, "max_json_depth", _DEFAULT_DEPTH)
    try:
        value: BaseModel = await asyncio.to_thread(parse, body, max_depth, model)
    except MalformedJSON as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
        raise RequestValidationError([error | {"ctx": {"error": exc.msg}}]) from None
    except InvalidBody as exc:
        raise RequestValidationError([error | {"loc": ("body", *error["loc"])} for error in exc.errors]) from None
    return value
