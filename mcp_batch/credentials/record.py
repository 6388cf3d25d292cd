"""A tenant's credential for one backend, as stored (sealed whole) and as listed (never its value)."""

from __future__ import annotations

import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from mcp_batch.records import iso


class CredentialKind(StrEnum):
    secret = "secret"  # a static secret the tenant gave (`tenant` auth)
    oauth = "oauth"  # tokens from the tenant's authorization-code grant (`oauth` auth)


class OAuthClient(BaseModel):
    """How a grant's tokens are refreshed and revoked: what discovery and registration found when it was made."""

    model_config = ConfigDict(extra="forbid")

    token_url: str
    revocation_url: str | None = None
    issuer: str | None = None
    resource: str | None = None  # the RFC 8707 resource indicator the tokens were asked for
    client_id: str
    client_secret: SecretStr | None = None  # a dynamically registered client's secret


class Credential(BaseModel):
    """One tenant's credential for one server. Values are SecretStr from Redis to the one line that sends them."""

    model_config = ConfigDict(extra="forbid")

    kind: CredentialKind
    secret: SecretStr | None = None
    access_token: SecretStr | None = None
    refresh_token: SecretStr | None = None
    expires_at: float | None = Field(None, description="When the access token expires (Unix seconds).")
    issued_at: float | None = Field(None, description="When the access token was issued (Unix seconds).")
    scopes: list[str] = Field(default_factory=list)
    set_at: float = Field(default_factory=time.time, description="When the tenant set or connected it (Unix seconds).")
    needs_connect: bool = Field(False, description="A refresh failed or the grant was revoked: connect again.")
    client: OAuthClient | None = None

    @classmethod
    def of_secret(cls, secret: SecretStr) -> Credential:
        return cls(kind=CredentialKind.secret, secret=secret)

    def value(self) -> SecretStr | None:
        """What a call carries: the secret, or the access token (None: nothing usable until reconnected)."""
        if self.needs_connect:
            return None
        return self.secret if self.kind is CredentialKind.secret else self.access_token

    def info(self, server: str) -> CredentialInfo:
        oauth = self.kind is CredentialKind.oauth
        return CredentialInfo(
            server=server,
            kind=self.kind,
            set_at=iso(self.set_at) or "",
            expires_at=iso(self.expires_at) if oauth else None,
            scopes=list(self.scopes) if oauth else None,
            needs_connect=self.needs_connect,
        )


class CredentialInfo(BaseModel):
    """What a tenant sees of one of its credentials."""

    server: str
    kind: CredentialKind
    set_at: str = Field(description="When it was set or connected (ISO 8601, UTC).")
    expires_at: str | None = Field(None, description="OAuth: when the access token expires (refreshed before then).")
    scopes: list[str] | None = Field(None, description="OAuth: the scopes granted.")
    needs_connect: bool = Field(False, description="OAuth: the grant no longer works; connect again.")


def refresh_at(credential: Credential, margin: float) -> float | None:
    """When an OAuth credential's access token should be refreshed: `margin` seconds before it expires, or a third
    of its lifetime before when that is shorter (a short-lived token is not refreshed at once). None: never."""
    if credential.kind is not CredentialKind.oauth or credential.expires_at is None:
        return None
    lifetime = max(0.0, credential.expires_at - (credential.issued_at or credential.set_at))
    return credential.expires_at - min(margin, lifetime / 3)


def refresh_due(credential: Credential, margin: float, now: float | None = None) -> bool:
    """Whether the credential's token should be refreshed before it is sent (`refresh_at` has come)."""
    at = refresh_at(credential, margin)
    return at is not None and at <= (time.time() if now is None else now)
