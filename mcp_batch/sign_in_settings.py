"""The settings of who signs in and as whom backends are called: issuers of callers' tokens, the service's public
URL, tenants' sealed credentials, and the secret cursors are signed with. A part of the one settings object
(mcp_batch/settings.py's `Settings` is this and the rest), kept apart only for the size of that module."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, SecretStr
from pydantic_settings import BaseSettings

from mcp_batch.issuers import OAuthIssuer, public_url_entry


class SignInSettings(BaseSettings):
    oauth_issuers: list[OAuthIssuer] = Field(
        default_factory=list,
        description='The identity providers whose access tokens are accepted (auth `oauth`): a JSON list of `{"issuer",'
        ' "audience"?, "tenant_claim"?, "scopes"?, ...}` (every field: docs/operations.md, "Signing in with OAuth").',
    )
    public_url: Annotated[str | None, AfterValidator(public_url_entry)] = Field(
        None,
        description="The URL callers reach the service at (`https://batches.example.com`): the resource its Protected "
        "Resource Metadata names and the default audience of tokens; needed when auth includes `oauth`.",
    )
    secrets_keys: SecretStr | None = Field(
        None,
        description="Keys tenants' backend credentials are sealed with (AES-256-GCM): a JSON list of base64 32-byte "
        "keys (`mcp-batch credentials new-key`); the first seals, all open (rotate: new key first, `mcp-batch "
        "credentials rotate`, drop the old). Needed with `tenant`/`oauth` backends; the same in the API and workers.",
    )
    max_tenant_sessions: int = Field(
        64,
        ge=1,
        description="Most tenants' sessions (each one tenant's) a worker keeps open; then the LRU idle closes.",
    )
    tenant_session_idle_seconds: float = Field(
        300.0,
        gt=0,
        description="A worker closes a tenant's session (a stdio process of that tenant's) unused this long.",
    )
    cursor_secret: SecretStr | None = Field(
        None,
        description="Secret the `next_cursor` of truncated items is signed with (HMAC-SHA256; a key is derived from "
        "it). Give every API and worker the same one. Unset: a random key is made once and kept in Redis (shared by "
        "every process using that Redis), so cursors stop verifying if Redis loses its data.",
    )
