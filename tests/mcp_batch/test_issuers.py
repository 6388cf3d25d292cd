"""MCP_BATCH_OAUTH_ISSUERS and MCP_BATCH_PUBLIC_URL, checked as the settings are read."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from mcp_batch.errors import ConfigError
from mcp_batch.issuers import OAuthIssuer, oauth_complete
from mcp_batch.settings import Settings


@pytest.mark.parametrize(
    "issuer",
    ["https://login.example.com/realms/acme", "http://127.0.0.1:8080", "http://localhost:3000", "http://[::1]"],
)
def test_an_issuer_is_https_or_on_a_loopback_address(issuer: str) -> None:
    assert OAuthIssuer(issuer=issuer).issuer == issuer


@pytest.mark.parametrize("issuer", ["http://login.example.com", "https://login.example.com?x=1", "ftp://x", "login"])
def test_a_plain_http_or_odd_issuer_is_refused(issuer: str) -> None:
    with pytest.raises(ValidationError, match="issuer"):
        OAuthIssuer(issuer=issuer)


def test_scopes_default_to_the_rights_names_and_may_be_renamed() -> None:
    issuer = OAuthIssuer.model_validate({"issuer": "https://idp.example", "scopes": {"read": "Batches.Read"}})
    assert (issuer.scopes.read, issuer.scopes.write, issuer.tenant_claim) == ("Batches.Read", "write", "tenant")


def test_oauth_needs_an_issuer_and_a_public_url() -> None:
    issuer = OAuthIssuer(issuer="https://idp.example")
    with pytest.raises(ConfigError, match="MCP_BATCH_OAUTH_ISSUERS names no issuer"):
        oauth_complete("keys,oauth", [], "https://batches.example.com")
    with pytest.raises(ConfigError, match="MCP_BATCH_PUBLIC_URL is not set"):
        oauth_complete("oauth", [issuer], None)
    oauth_complete("oauth", [issuer], "https://batches.example.com")
    oauth_complete("keys", [], None)


def test_the_public_url_and_issuers_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_BATCH_OAUTH_ISSUERS", json.dumps([{"issuer": "https://idp.example", "leeway_seconds": 5}]))
    monkeypatch.setenv("MCP_BATCH_PUBLIC_URL", "https://batches.example.com/")
    settings = Settings()
    assert settings.public_url == "https://batches.example.com" and settings.oauth_issuers[0].leeway_seconds == 5


def test_a_public_url_with_a_path_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_BATCH_PUBLIC_URL", "https://example.com/batches")
    with pytest.raises(ValidationError, match="without a path"):
        Settings()
