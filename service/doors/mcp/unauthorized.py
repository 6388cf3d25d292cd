"""The MCP door's 401 and 403: the same status and `WWW-Authenticate` as REST, with a JSON-RPC error for a body.

An MCP client reads a JSON-RPC error from a non-2xx answer and raises it with its message (the SDK's `Client`
raises `MCPError("an API key is required: ...")`), where a REST body (`{"detail": ...}`) left it only "Server returned
an error response". The request's id is not read (the body is not parsed before the key is checked): it is null,
which the JSON-RPC spec allows for an error that cannot name its request.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

UNAUTHORIZED = -32001  # implementation-defined server error: no valid API key


FORBIDDEN = -32003  # implementation-defined server error: the caller lacks the right (a token: the scope)


def jsonrpc_refusal(status: int, detail: str, challenge: str) -> JSONResponse:
    """The sign-in's 401 or 403 (service/auth.py) as a JSON-RPC error, with its `WWW-Authenticate` challenge."""
    code = UNAUTHORIZED if status == 401 else FORBIDDEN
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": detail}}
    return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": challenge})
