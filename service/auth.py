"""Who is calling: `Authorization: Bearer <key>` checked against the keys file, at the HTTP edge.

REST routes take the caller as a dependency (`CallerDep`); the MCP front door, a plain ASGI endpoint, is wrapped so
that its tools read the caller from a context variable. With `MCP_BATCH_AUTH=none` every caller is the one default
tenant with every right.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_batch.errors import Unauthenticated
from mcp_batch.models import ErrorDetail
from mcp_batch.tenants import ANYONE, Caller, KeyRing

current_caller: ContextVar[Caller] = ContextVar("current_caller")


def identify(authorization: str | None, keyring: KeyRing | None) -> Caller:
    """The caller an Authorization header names (Unauthenticated when it names none)."""
    if keyring is None:
        return ANYONE
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
    caller = keyring.caller(key.strip())
    if caller is None:
        raise Unauthenticated("the API key is not valid")
    return caller


_bearer = HTTPBearer(auto_error=False, description="An API key from the keys file (not needed with auth off).")


# The dependencies are coroutines, though they never wait: FastAPI runs a plain function's in a worker thread,
# a thread hop on every request.
async def get_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    keyring: KeyRing | None = request.app.state.keyring
    return identify(f"Bearer {credentials.credentials}" if credentials else None, keyring)


CallerDep = Annotated[Caller, Depends(get_caller)]


async def caller_or_refusal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller | Unauthenticated:
    """The caller, or why there is none: for a door that answers a missing key in its own shape."""
    try:
        return await get_caller(request, credentials)
    except Unauthenticated as exc:
        return exc


CallerOrRefusalDep = Annotated[Caller | Unauthenticated, Depends(caller_or_refusal)]

AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "No API key, or one the keys file does not hold."},
    403: {"description": "The key may not do this: `detail` lists each call or field at fault (`loc`, `msg`)."},
}


class Authenticated:
    """An ASGI app behind the same check: 401 without a valid key, else the caller is set for the request."""

    def __init__(
        self, app: ASGIApp, keyring: KeyRing | None, reject: Callable[[str], JSONResponse] | None = None
    ) -> None:
        self.app = app
        self.keyring = keyring
        self.reject = reject or unauthorized  # the 401 answer, in the door's own error shape

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            caller = identify(headers.get("authorization"), self.keyring)
        except Unauthenticated as exc:
            await self.reject(str(exc))(scope, receive, send)
            return
        token = current_caller.set(caller)
        try:
            await self.app(scope, receive, send)
        finally:
            current_caller.reset(token)


def unauthorized(detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
