"""Routes whose JSON bodies are parsed strictly (`core.json_body`) and must say they are JSON.

A route with a body answers 415 to a body sent as anything but `application/json` (or `+json`), a missing
Content-Type included, rather than handing the raw bytes to validation; a JSON body it cannot take (see
`json_body.loads`) is a 422 `json_invalid` naming what is wrong. Neither ever quotes the body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from email.message import Message
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel

from mcp_batch.models import ErrorDetail
from mcp_batch.settings import Settings
from service.bodies import off_loop
from service.bodies.strict_json import MalformedJSON, loads

_DEFAULT_DEPTH = Settings.model_fields["max_json_depth"].default

UNSUPPORTED_MEDIA_TYPE = "the body must be JSON, sent with Content-Type: application/json"


class StrictJSONRequest(Request):
    """A request whose `json()` is `json_body.loads`, its failures reported as decode errors (FastAPI's 422)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            max_depth = getattr(self.app.state, "max_json_depth", _DEFAULT_DEPTH)
            try:
                self._json = loads(await self.body(), max_depth)
            except MalformedJSON as exc:
                raise json.JSONDecodeError(exc.msg, "", exc.pos) from None
        return self._json


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


class StrictJSONRoute(APIRoute):
    """An APIRoute that parses its JSON body with `json_body.loads` and answers 415 to a body that is not JSON."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self.body_field is not None:  # a copy: the responses given may be shared by other routes
            refusal = {"model": ErrorDetail, "description": UNSUPPORTED_MEDIA_TYPE.capitalize()}
            self.responses = {415: refusal, **self.responses}

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None
        model = _body_model(self)
        known = _query_names(self.dependant)

        async def strict(request: Request) -> Response:
            if takes_body and has_body(request) and not is_json(request.headers.get("content-type")):
                return JSONResponse({"detail": UNSUPPORTED_MEDIA_TYPE}, status_code=415)
            unknown = sorted(set(request.query_params) - known)
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
            if len(body) <= off_loop.OFF_LOOP_BYTES:
                return await handler(strict_request)
            with off_loop.collector_paused():
                strict_request._json = await _parse_off_loop(strict_request, body, model)
                try:
                    return await handler(strict_request)
                finally:  # the answer is made: free the request's model off the loop, before it is dropped here
                    await asyncio.to_thread(off_loop.drain, strict_request._json)

        return strict


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route takes, its dependencies' included."""
    names: set[str] = set()
    pending = [dependant]
    while pending:
        node = pending.pop()
        names |= {param.alias for param in node.query_params}
        pending.extend(node.dependencies)
    return names


def _body_model(route: APIRoute) -> type[BaseModel] | None:
    """The model of the route's one (not embedded) body parameter, if it has one."""
    params = route.dependant.body_params
    if len(params) != 1 or getattr(params[0].field_info, "embed", False):
        return None
    annotation = params[0].field_info.annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


async def _parse_off_loop(request: Request, body: bytes, model: type[BaseModel]) -> BaseModel:
    """The body parsed and validated in a worker thread (see body_reading), its faults the 422 FastAPI would give.

    The validated instance then goes to FastAPI as the parsed body, which passes a model instance through its own
    validation as it is (pydantic does not revalidate instances); tests/service/test_body_reading.py fails if that
    changes (the model would be validated twice, the second time on the event loop)."""
    max_depth = getattr(request.app.state, "max_json_depth", _DEFAULT_DEPTH)
    try:
        value: BaseModel = await asyncio.to_thread(off_loop.parse, body, max_depth, model)
    except MalformedJSON as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {}}
        raise RequestValidationError([error | {"ctx": {"error": exc.msg}}]) from None
    except off_loop.InvalidBody as exc:
        raise RequestValidationError([error | {"loc": ("body", *error["loc"])} for error in exc.errors]) from None
    return value
