"""The resource server's face: Protected Resource Metadata (RFC 9728) for the service and, in its path form, for the
MCP door, and the `WWW-Authenticate` challenges that point a client to it (RFC 6750 section 3).

An MCP client that gets a 401 on /mcp reads `resource_metadata` from the challenge, fetches the metadata, and from
its `authorization_servers` discovers where to sign in; `resource` is what it asks a token for (RFC 8707).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mcp_batch.tenants import Right

WELL_KNOWN = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class ResourceFace:
    """What the metadata and the challenges say: the public URL, the issuers, the scopes they grant, and the scope
    named in a 401 for each right (the first issuer's: what a client should ask for first)."""

    public_url: str
    issuers: tuple[str, ...]
    scopes: tuple[str, ...]
    first_scopes: tuple[tuple[Right, str], ...]

    def scope_for(self, right: Right) -> str:
        return next(scope for granted, scope in self.first_scopes if granted is right)

    def resource(self, path: str) -> str:
        """The resource a request to `path` is for: the MCP door's own, or the service's."""
        return f"{self.public_url}{MCP_PATH}" if _is_mcp(path) else self.public_url

    def metadata_url(self, path: str) -> str:
        return f"{self.public_url}{WELL_KNOWN}{MCP_PATH if _is_mcp(path) else ''}"

    def metadata(self, path: str) -> dict[str, object]:
        return {
            "resource": self.resource(path),
            "authorization_servers": list(self.issuers),
            "scopes_supported": list(self.scopes),
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-batch",
        }

    def challenge(self, path: str, error: str | None = None, scope: str | None = None) -> str:
        """The `WWW-Authenticate` value of a 401 (error="invalid_token" when a token was presented; the scope to ask
        for, as the MCP authorization spec has a client read it) or a 403 (error="insufficient_scope" with the
        scope that would do)."""
        parts = [f'resource_metadata="{self.metadata_url(path)}"']
        if error:
            parts.insert(0, f'error="{error}"')
        if scope:
            parts.append(f'scope="{scope}"')
        return "Bearer " + ", ".join(parts)


def _is_mcp(path: str) -> bool:
    return path in (MCP_PATH, MCP_PATH + "/")


def face_scopes(mappings: list[dict[Right, str]]) -> tuple[str, ...]:
    """Every scope the issuers map to a right, each once, in the rights' order."""
    seen: dict[str, None] = {}
    for right in Right:
        for mapping in mappings:
            seen.setdefault(mapping[right], None)
    return tuple(seen)


@router.get(WELL_KNOWN)
async def service_metadata(request: Request) -> JSONResponse:
    face: ResourceFace = request.app.state.resource_face
    return JSONResponse(face.metadata("/"), headers={"Cache-Control": "max-age=3600"})


@router.get(WELL_KNOWN + MCP_PATH)
async def mcp_metadata(request: Request) -> JSONResponse:
    face: ResourceFace = request.app.state.resource_face
    return JSONResponse(face.metadata(MCP_PATH), headers={"Cache-Control": "max-age=3600"})
