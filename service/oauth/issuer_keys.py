"""One issuer's metadata and signing keys: discovered (OpenID discovery, else RFC 8414), cached, and fetched again
when a token names a key id the cache does not hold, at most once a `refresh_seconds` (a minute by default), so a
provider's key rotation needs no restart and a stream of tokens with made-up key ids costs the provider one request
a minute."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

_ASYMMETRIC = frozenset({"RSA", "EC", "OKP"})  # a shared secret in a JWKS would let anyone who reads it sign tokens
_MAX_DOCUMENT_BYTES = 1 << 20


class IssuerUnavailable(Exception):
    """The issuer's metadata or keys could not be read (its name only: never a response body)."""


class IssuerKeys:
    """The metadata and keys of one issuer, read over `http`."""

    def __init__(self, issuer: str, http: httpx.AsyncClient, refresh_seconds: float) -> None:
        self.issuer = issuer
        self._http = http
        self._refresh_seconds = refresh_seconds
        self._metadata: dict[str, Any] | None = None
        self._keys: KeySet | None = None
        self._fetched_at: float | None = None
        self._discovering = asyncio.Lock()
        self._fetching = asyncio.Lock()

    async def metadata(self) -> dict[str, Any]:
        """The issuer's authorization server metadata, read once."""
        if self._metadata is None:
            async with self._discovering:
                if self._metadata is None:
                    self._metadata = await self._discover()
        return self._metadata

    async def keys(self, kid: str | None) -> KeySet:
        """The issuer's signing keys, fetched again first when `kid` is not among them (and a minute has passed)."""
        if self._keys is None or (kid is not None and not _holds(self._keys, kid)):
            async with self._fetching:
                stale = self._keys is None or (kid is not None and not _holds(self._keys, kid))
                due = self._fetched_at is None or time.monotonic() - self._fetched_at >= self._refresh_seconds
                if stale and due:
                    self._fetched_at = time.monotonic()
                    self._keys = await self._fetch_keys()
        if self._keys is None:
            raise IssuerUnavailable(f"the signing keys of {self.issuer} could not be read")
        return self._keys

    async def _discover(self) -> dict[str, Any]:
        parts = urllib.parse.urlsplit(self.issuer)
        path = parts.path.rstrip("/")
        origin = f"{parts.scheme}://{parts.netloc}"
        for url in (
            f"{origin}{path}/.well-known/openid-configuration",
            f"{origin}/.well-known/oauth-authorization-server{path}",
        ):
            document = await self._get_json(url, missing_ok=True)
            if document is not None:
                if document.get("issuer") != self.issuer:  # RFC 8414 section 3.3: no impersonation by a look-alike
                    raise IssuerUnavailable(f"the metadata of {self.issuer} names another issuer")
                return document
        raise IssuerUnavailable(f"no OpenID or OAuth metadata found for {self.issuer}")

    async def _fetch_keys(self) -> KeySet:
        jwks_uri = (await self.metadata()).get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise IssuerUnavailable(f"the metadata of {self.issuer} names no jwks_uri")
        document = await self._get_json(jwks_uri)
        listed = document.get("keys") if document is not None else None
        if not isinstance(listed, list):
            raise IssuerUnavailable(f"the key set of {self.issuer} is not a JWKS")
        usable = [
            k for k in listed if isinstance(k, dict) and k.get("kty") in _ASYMMETRIC and k.get("use", "sig") == "sig"
        ]
        try:
            return KeySet.import_key_set({"keys": usable})
        except (JoseError, ValueError) as exc:
            raise IssuerUnavailable(f"the key set of {self.issuer} holds no usable signing key") from exc

    async def _get_json(self, url: str, missing_ok: bool = False) -> dict[str, Any] | None:
        try:
            response = await self._http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise IssuerUnavailable(f"{self.issuer} could not be reached ({type(exc).__name__})") from None
        if missing_ok and response.status_code in (404, 405):
            return None
        if response.status_code != 200 or len(response.content) > _MAX_DOCUMENT_BYTES:
            raise IssuerUnavailable(f"{self.issuer} answered {response.status_code} for {url}")
        try:
            document = json.loads(response.content)
        except ValueError:
            raise IssuerUnavailable(f"{self.issuer} answered {url} with something other than JSON") from None
        if not isinstance(document, dict):
            raise IssuerUnavailable(f"{self.issuer} answered {url} with something other than a JSON object")
        return document


def _holds(keys: KeySet, kid: str) -> bool:
    return any(key.kid == kid for key in keys.keys)
