"""The HTTP edge of the error tree: core exceptions become status codes here and nowhere else.

Validation errors never echo the submitted values (a secret in `arguments` must not come back in a 422). Every 422 and
403 names its faults with one form of `loc`, FastAPI's: where in the request first (`body`, `query`, `header`,
`path`), then the path inside it (`["body", "calls", 1, "id"]`); the core's problems, which name paths inside the
body, get the `body` in front here.
A Redis failure anywhere in a request is a 503 with one clear sentence, never a traceback; redis-py's pool reconnects
on the next request, so the API recovers by itself when Redis is back.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from mcp_batch.errors import (
    Backpressure,
    BatchAlreadyFinished,
    BatchNotEnded,
    BatchNotFound,
    Conflict,
    CredentialNotFound,
    Forbidden,
    HostNotAllowed,
    InvalidBatch,
    InvalidCursor,
    OAuthUnavailable,
    SealBroken,
    Unauthenticated,
)
from mcp_batch.tenants import Caller, Right
from service.auth import unauthorized

logger = logging.getLogger(__name__)


def _message(error: Any) -> str:
    """pydantic's message; for a body that is not JSON, with the parser's reason (it never quotes the body)."""
    reason = (error.get("ctx") or {}).get("error") if error["type"] == "json_invalid" else None
    return f"{error['msg']}: {reason}" if isinstance(reason, str) else str(error["msg"])


_PARTS = frozenset({"body", "query", "header", "path", "cookie"})


def _loc(loc: tuple[str | int, ...], where: str = "body") -> list[str | int]:
    """A core problem's location in FastAPI's form (the part of the request first)."""
    return list(loc) if loc and loc[0] in _PARTS else [where, *loc]


def allowed_methods(scope: Scope, routes: list[BaseRoute]) -> list[str]:
    """Every method some route of this path takes (a path may have a route per method)."""
    methods: set[str] = set()
    for route in routes:
        if route.matches(scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def forbidden_response(exc: Forbidden) -> JSONResponse:
    """403, each problem with its `loc`."""
    detail = [{"loc": _loc(p.loc), "msg": p.msg, "type": p.type} for p in exc.problems]
    return JSONResponse({"detail": detail}, status_code=403)


def host_refusal(exc: HostNotAllowed) -> JSONResponse:
    """421 Misdirected Request: this service does not answer for that host."""
    return JSONResponse({"detail": str(exc)}, status_code=421)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e["loc"]), "msg": _message(e), "type": e["type"]} for e in exc.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(InvalidBatch)
    async def invalid_batch(_: Request, exc: InvalidBatch) -> JSONResponse:
        where = "query" if isinstance(exc, InvalidCursor) else "body"  # the REST routes take a cursor as ?cursor=
        detail = [{"loc": _loc(p.loc, where), "msg": p.msg, "type": p.type} for p in exc.problems]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(Unauthenticated)
    async def unauthenticated(_: Request, exc: Unauthenticated) -> JSONResponse:
        return unauthorized(str(exc))

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, exc: Forbidden) -> JSONResponse:
        response = forbidden_response(exc)
        caller, face = getattr(request.state, "caller", None), getattr(request.app.state, "resource_face", None)
        scope = caller.scope_for(Right(exc.right)) if isinstance(caller, Caller) and exc.right else None
        if scope is not None and face is not None:  # a token: the scope to step up to (RFC 6750 section 3.1)
            response.headers["WWW-Authenticate"] = face.challenge(request.url.path, "insufficient_scope", scope)
        return response

    @app.exception_handler(BatchNotFound)
    async def not_found(_: Request, exc: BatchNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(CredentialNotFound)
    async def no_credential(_: Request, exc: CredentialNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(SealBroken)
    async def seal_broken(_: Request, exc: SealBroken) -> JSONResponse:
        detail = "a stored credential opens under none of the service's secrets keys: the operator must restore the key"
        return JSONResponse({"detail": detail}, status_code=500)

    @app.exception_handler(BatchAlreadyFinished)
    async def already_finished(_: Request, exc: BatchAlreadyFinished) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "status": exc.status}, status_code=409)

    @app.exception_handler(BatchNotEnded)
    async def not_ended(_: Request, exc: BatchNotEnded) -> JSONResponse:
        cancel = f"/v1/batches/{exc.batch_id}/cancel"
        return JSONResponse({"detail": str(exc), "status": exc.status, "cancel": cancel}, status_code=409)

    @app.exception_handler(Backpressure)
    async def backpressure(_: Request, exc: Backpressure) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)}
        return JSONResponse({"detail": str(exc)}, status_code=429, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 405:  # Starlette names the methods of the first route of the path only
            allowed = allowed_methods(request.scope, getattr(request.app.state, "routes", []))
            exc = StarletteHTTPException(405, exc.detail, {**(exc.headers or {}), "Allow": ", ".join(allowed)})
        return await http_exception_handler(request, exc)

    @app.exception_handler(OAuthUnavailable)
    async def oauth_unavailable(_: Request, exc: OAuthUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=502)

    @app.exception_handler(Conflict)
    async def conflict(_: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)
