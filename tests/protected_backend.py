"""The tests' OAuth-protected MCP backend: streamable HTTP, every request's bearer token checked against the tests'
authorization server (tests/oauth_server.py) by RFC 7662 introspection through the SDK's server-side auth, its
Protected Resource Metadata (RFC 9728) served, and a 401 naming it in WWW-Authenticate. `whoami` answers the token's
subject, so a test sees which account a call reached the backend as; `seen` tallies the calls per subject.

Started as a real process (`python -m tests.protected_backend --port N --fd F --issuer URL`); not part of the package.
"""

from __future__ import annotations

import argparse
import asyncio
import collections

import httpx
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import AnyHttpUrl

_seen: collections.Counter[str] = collections.Counter()
READ = ToolAnnotations(readOnlyHint=True)  # batches run read-only tools without asking for write


class IntrospectionVerifier:
    """A TokenVerifier asking the authorization server whether a token is active, and for whom."""

    def __init__(self, issuer: str) -> None:
        self.endpoint = f"{issuer}/introspect"
        self.http = httpx.AsyncClient(timeout=10)

    async def verify_token(self, token: str) -> AccessToken | None:
        answer = (await self.http.post(self.endpoint, data={"token": token})).json()
        if not answer.get("active"):
            return None
        return AccessToken(
            token=token,
            client_id=answer["client_id"],
            scopes=answer["scope"].split(),
            expires_at=answer["exp"],
            resource=answer.get("aud"),
            subject=answer["sub"],
            claims={"iss": answer["iss"]},
        )


def create_server(issuer: str, resource: str) -> MCPServer:
    server = MCPServer(
        "protected-backend",
        token_verifier=IntrospectionVerifier(issuer),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(resource),
            required_scopes=["mcp"],
            validate_token_resource=True,
        ),
    )

    @server.tool(annotations=READ)
    async def whoami(seconds: float = 0.0) -> str:
        """The subject of the token this call came with (after `seconds`)."""
        await asyncio.sleep(seconds)
        access = get_access_token()
        subject = access.subject if access and access.subject else "?"
        _seen[subject] += 1
        return subject

    @server.tool(annotations=READ)
    def seen() -> dict[str, int]:
        """How many `whoami` calls came with each subject's token."""
        return dict(_seen)

    return server


def main() -> None:
    parser = argparse.ArgumentParser(prog="protected_backend")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket the parent bound to the port")
    parser.add_argument("--issuer", required=True, help="the authorization server's issuer URL")
    args = parser.parse_args()
    resource = f"http://127.0.0.1:{args.port}/mcp"
    app = create_server(args.issuer, resource).streamable_http_app()
    uvicorn.run(app, fd=args.fd, log_level="warning")


if __name__ == "__main__":
    main()
