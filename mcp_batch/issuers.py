"""The identity providers whose access tokens the service accepts (`MCP_BATCH_OAUTH_ISSUERS`): plain configuration,
checked when the settings are read.

    [{"issuer": "https://login.example.com/realms/acme", "audience": "https://batches.example.com",
      "tenant_claim": "org_id", "scopes": {"read": "batches.read", "write": "batches.write"}}]

`audience` defaults to the service's public URL (MCP_BATCH_PUBLIC_URL); `tenant_claim` names the claim that holds
the caller's tenant (a token without it is refused); `scopes` maps each right to the scope that grants it (unnamed
rights map to the scope of their own name). An issuer is https, except on a loopback address (tests, `dev`).
"""

from __future__ import annotations

import ipaddress
import urllib.parse

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from mcp_batch.errors import ConfigError


class RightScopes(BaseModel):
    """The scope that grants each right."""

    model_config = ConfigDict(extra="forbid")

    read: str = Field("read", min_length=1)
    write: str = Field("write", min_length=1)
    credentials: str = Field("credentials", min_length=1)
    admin: str = Field("admin", min_length=1)


class OAuthIssuer(BaseModel):
    """One identity provider and how its tokens map to tenants and rights."""

    model_config = ConfigDict(extra="forbid")

    issuer: str = Field(description="The issuer identifier (`iss`), as its discovery document states it.")
    audience: str | None = Field(None, description="The `aud` its tokens must carry (default: the public URL).")
    tenant_claim: str = Field("tenant", min_length=1, description="The claim naming the caller's tenant.")
    scopes: RightScopes = Field(default_factory=RightScopes)
    introspection_client_id: str | None = Field(
        None, description="With a secret: opaque (non-JWT) tokens are checked at the issuer's introspection endpoint."
    )
    introspection_client_secret: SecretStr | None = None
    leeway_seconds: int = Field(30, ge=0, le=300, description="Clock skew allowed on `exp`, `nbf` and `iat`.")
    keys_refresh_seconds: float = Field(
        60.0, ge=1, description="Its keys are fetched again for an unknown key id at most this often."
    )
    dashboard_client_id: str | None = Field(
        None,
        description="A public client (authorization code + PKCE) the dashboard signs users in with; its redirect URI "
        "is `<public URL>/ui/`. The first issuer that names one is offered on /ui.",
    )

    @field_validator("issuer")
    @classmethod
    def _https_or_loopback(cls, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        if parts.query or parts.fragment or not parts.hostname:
            raise ValueError("an issuer is a URL with a host and no query or fragment")
        if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback(parts.hostname)):
            raise ValueError("an issuer must be https (plain http only on a loopback address)")
        return value

    def introspects(self) -> bool:
        return self.introspection_client_id is not None and self.introspection_client_secret is not None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def public_url_entry(value: str | None) -> str | None:
    """MCP_BATCH_PUBLIC_URL, checked: `http(s)://host[:port]` (no path: the metadata lives at the root)."""
    if value is None:
        return None
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
        raise ValueError("the public URL is http(s)://host[:port], without a path or query")
    return value.rstrip("/")


def oauth_complete(auth: str, issuers: list[OAuthIssuer], public_url: str | None) -> None:
    """With tokens taken, an issuer to take them from and the URL they are for (ConfigError, at the API's start)."""
    if "oauth" in auth and not issuers:
        raise ConfigError("auth includes oauth, but MCP_BATCH_OAUTH_ISSUERS names no issuer")
    if "oauth" in auth and public_url is None:
        raise ConfigError("auth includes oauth, but MCP_BATCH_PUBLIC_URL is not set (the resource tokens are for)")
