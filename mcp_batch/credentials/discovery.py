"""Finding an OAuth-protected MCP server's authorization server, as the MCP authorization spec says.

The server's 401 names its Protected Resource Metadata (RFC 9728, `resource_metadata` in WWW-Authenticate; else the
well-known URLs), which names the resource and its authorization servers; then that server's metadata (RFC 8414, or
OpenID discovery). The URL candidates, the answers' parsing and the issuer check are the MCP SDK's
(`mcp.client.auth.utils`), so they follow the spec as the SDK does.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx2
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    issuers_match,
)
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from mcp_types import LATEST_PROTOCOL_VERSION

from mcp_batch.errors import OAuthUnavailable

_PROBE = {"jsonrpc": "2.0", "id": 0, "method": "ping"}  # any request: an unauthorized one earns the 401 we read


@dataclass(frozen=True)
class Discovery:
    """What an MCP server says of its authorization: the resource its tokens are for, and its server's metadata."""

    resource: str
    metadata: OAuthMetadata
    resource_metadata: ProtectedResourceMetadata | None


async def discover(http: httpx2.AsyncClient, server: str, url: str) -> Discovery:
    """The authorization of the MCP server at `url` (configured as `server`); OAuthUnavailable naming the step that
    failed."""
    try:
        probe = await http.post(
            url,
            json=_PROBE,
            headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": LATEST_PROTOCOL_VERSION},
        )
        pointed = extract_resource_metadata_from_www_auth(probe) if probe.status_code in (401, 403) else None
        prm = None
        for candidate in build_protected_resource_metadata_discovery_urls(pointed, url):
            prm = await handle_protected_resource_response(await http.send(create_oauth_metadata_request(candidate)))
            if prm is not None:
                break
        expected = resource_url_from_server_url(url)
        if prm is not None and not check_resource_allowed(expected, str(prm.resource)):
            raise OAuthUnavailable(server, "its protected resource metadata names another resource")
        issuer = str(prm.authorization_servers[0]) if prm is not None else None
        for candidate in build_oauth_authorization_server_metadata_discovery_urls(issuer, url):
            ok, metadata = await handle_auth_metadata_response(
                await http.send(create_oauth_metadata_request(candidate))
            )
            if not ok:
                break
            if metadata is not None:
                if issuer is not None and not issuers_match(str(metadata.issuer), issuer):
                    raise OAuthUnavailable(server, "its authorization server's metadata names another issuer")
                resource = str(prm.resource) if prm is not None else expected
                return Discovery(resource, metadata, prm)
    except httpx2.HTTPError as exc:
        raise OAuthUnavailable(server, f"its authorization could not be discovered ({type(exc).__name__})") from None
    raise OAuthUnavailable(server, "it publishes no authorization server metadata")
