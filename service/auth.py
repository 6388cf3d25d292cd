"""Who is calling, decided once per request at the edge: `SignIn`, an ASGI middleware in front of every route.

It reads `Authorization: Bearer <credential>` from the headers alone, before any body is read, and names the caller:
an API key from the keys file (`MCP_BATCH_AUTH=keys`), an access token from a configured issuer (`oauth`), either
(`keys,oauth`), or with `none` the one default tenant with every right. The caller is left in the request's state
for the REST and Gumloop routes (`CallerDep`) and in a context variable for the MCP door's tools. Every route needs a
caller that has `read` (a token whose scopes grant no right may do nothing), /metrics one that has `admin`; only the
paths in `PUBLIC` (health, docs, the dashboard's files, the resource metadata, the upstream OAuth flow's browser
legs) and /metrics when public go without,
and a path no route serves is left to the router's 404 (looked up only for a request about to be refused).
A refusal is answered in the door's own shape (the `refusals` given by path), with the challenge of RFC 6750.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_batch.errors import Unauthenticated
from mcp_batch.models import ErrorDetail
from mcp_batch.tenants import ANYONE, Caller, KeyRing, Right
from service.oauth.issuer_keys import IssuerUnavailable
from service.oauth.resource import WELL_KNOWN, ResourceFace
from service.oauth.tokens import TokenCheck

current_caller: ContextVar[Caller] = ContextVar("current_caller")

METRICS_PATH = "/metrics"
PUBLIC = frozenset({"/healthz", "/readyz", "/ui", "/ui/", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
# The upstream OAuth flow's browser legs: a signed state (or start link) names the tenant, not a key.
PUBLIC |= {"/v1/oauth/callback", "/v1/oauth/start"}
PUBLIC_PREFIXES = ("/ui/", "/docs-assets/", WELL_KNOWN)

# A door's refusal: (status, message, WWW-Authenticate value) -> the answer in its own shape.
Refusal = Callable[[int, str, str], Response]


def rest_refusal(status: int, detail: str, challenge: str) -> Response:
    """401 `{"detail": "..."}`, or 403 in the shape of every other 403 (a list of problems)."""
    body: object = detail if status == 401 else [{"loc": [], "msg": detail, "type": "forbidden"}]
    return JSONResponse({"detail": body}, status_code=status, headers={"WWW-Authenticate": challenge})


class SignIn:
    """Names the caller of every request to a route that needs one; refuses, from the headers alone, one without."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keyring: KeyRing | None,
        tokens: TokenCheck | None,
        face: ResourceFace | None,
        metrics_public: bool,
        refusals: dict[str, Refusal],
        routes: Sequence[BaseRoute],
    ) -> None:
        self.app = app
        self.keyring = keyring
        self.tokens = tokens
        self.face = face
        self.public = PUBLIC | {METRICS_PATH} if metrics_public else PUBLIC
        self.refusals = refusals
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in self.public or path.startswith(PUBLIC_PREFIXES):
            await self.app(scope, receive, send)
            return
        authorization = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        try:
            caller = await self.identify(authorization.decode("latin-1") if authorization is not None else None)
        except Unauthenticated as exc:
            challenge = self._challenge(path, authorization is not None, None, _needed(path))
            await self._refuse(scope, receive, send, 401, str(exc), challenge)
            return
        except IssuerUnavailable as exc:
            self._label(scope)
            response = JSONResponse({"detail": f"cannot check the token now: {exc}"}, 503, {"Retry-After": "5"})
            await response(scope, receive, send)
            return
        needed = _needed(path)
        if not caller.may(needed):
            challenge = self._challenge(path, True, "insufficient_scope", needed, caller.scope_for(needed))
            what = "the operator's routes need" if needed is Right.admin else "every route needs"
            await self._refuse(scope, receive, send, 403, f"{what} the {needed.value!r} right", challenge)
            return
        scope["state"] = {**scope.get("state", {}), "caller": caller}
        token = current_caller.set(caller)
        try:
            await self.app(scope, receive, send)
        finally:
            current_caller.reset(token)

    async def identify(self, authorization: str | None) -> Caller:
        """The caller an Authorization header names (Unauthenticated when it names none)."""
        if self.keyring is None and self.tokens is None:
            return ANYONE
        scheme, _, credential = (authorization or "").partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthenticated(self._wanted())
        caller = self.keyring.caller(credential) if self.keyring is not None else None
        if caller is not None:
            return caller
        if self.tokens is None:
            raise Unauthenticated("the API key is not valid")
        return await self.tokens.caller(credential)

    def _wanted(self) -> str:
        if self.tokens is None:
            return "an API key is required: Authorization: Bearer <key>"
        if self.keyring is None or not self.keyring.has_keys():
            return "an access token is required: Authorization: Bearer <token>"
        return "an API key or an access token is required: Authorization: Bearer <key or token>"

    def _challenge(self, path: str, presented: bool, error: str | None, needed: Right, scope: str | None = None) -> str:
        if self.face is None:
            return "Bearer"
        error = error or ("invalid_token" if presented else None)
        return self.face.challenge(path, error, scope or self.face.scope_for(needed))

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, detail: str, challenge: str
    ) -> None:
        if not self._label(scope):  # no such route: the router's 404, as for anyone
            await self.app(scope, receive, send)
            return
        refuse = self.refusals.get(scope["path"], rest_refusal)
        await refuse(status, detail, challenge)(scope, receive, send)

    def _label(self, scope: Scope) -> bool:
        """As the router would: the request metrics count a refusal under its route's template. False when no route
        serves the path (with any method)."""
        served = False
        for route in self.routes:
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope.update(child_scope)
                return True
            served = served or match is Match.PARTIAL
        return served


def _needed(path: str) -> Right:
    return Right.admin if path == METRICS_PATH else Right.read


_bearer = HTTPBearer(auto_error=False, description="An API key from the keys file, or an OAuth access token.")


# A coroutine, though it never waits: FastAPI runs a plain function's in a worker thread, a hop on every request.
async def get_caller(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Caller:
    """The caller SignIn named (`_` only puts the bearer scheme in the OpenAPI document)."""
    caller = getattr(request.state, "caller", None)
    if not isinstance(caller, Caller):  # a route SignIn lets through unauthenticated must not ask for a caller
        raise Unauthenticated("this route is not behind the sign-in")
    return caller


CallerDep = Annotated[Caller, Depends(get_caller)]

AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "No API key or access token, or one that is not valid."},
    403: {
        "description": "The caller may not do this: `detail` lists each call or field at fault (`loc`, `msg`); for a "
        'token, `WWW-Authenticate` says `error="insufficient_scope"` and the scope that would do.'
    },
}


def unauthorized(detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
