"""An access token -> the caller it names, or Unauthenticated saying what was wrong (never what the token holds).

A JWT is checked against the keys of the issuer its `iss` names, that issuer's only: a signature by an algorithm of
`ALGORITHMS` (no `none`, no HMAC: a public key is no secret), `iss`, `aud` (the issuer's audience, by default the
service's public URL or its /mcp), `exp`, `nbf` and `iat` within the leeway. A token that is not a JWT is sent to the
introspection endpoint (RFC 7662) of each issuer configured for it. Either way the caller a token names is kept,
under the token's SHA-256, until the token expires: a client sends the same token for its whole life, and checking
its signature again on every request would cost more than the rest of a cheap request.
The tenant comes from the issuer's tenant claim; the rights from the scopes (`scope`, or `scp` as Entra ID and Okta
put them, or Entra ID's app `roles`), within the tenant's bounds (mcp_batch/tenants.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

import httpx
from joserfc import jws
from joserfc.errors import ExpiredTokenError, InvalidClaimError, JoseError, MissingClaimError, UnsupportedAlgorithmError
from joserfc.jwt import JWTClaimsRegistry

from mcp_batch.errors import Unauthenticated
from mcp_batch.issuers import OAuthIssuer
from mcp_batch.tenants import Caller, KeyRing, Right
from service.oauth.issuer_keys import IssuerKeys, IssuerUnavailable

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_TENANT = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")  # as the keys file's: a tenant's name goes into Redis keys
_MAX_CACHED = 10_000


class TokenCheck:
    """The issuers' tokens, checked; `audiences` the default audiences (the public URL, and its /mcp)."""

    def __init__(
        self, issuers: list[OAuthIssuer], audiences: list[str], keyring: KeyRing, http: httpx.AsyncClient
    ) -> None:
        self._issuers = {i.issuer: (i, IssuerKeys(i.issuer, http, i.keys_refresh_seconds)) for i in issuers}
        self._audiences = audiences
        self._keyring = keyring
        self._http = http
        self._checked: dict[bytes, tuple[Caller, float]] = {}  # token hash -> (caller, expiry)

    def issuers(self) -> list[str]:
        return list(self._issuers)

    async def metadata(self, issuer: str) -> dict[str, Any]:
        """A configured issuer's discovered metadata."""
        return await self._issuers[issuer][1].metadata()

    async def caller(self, token: str) -> Caller:
        """The caller the token names; Unauthenticated when it is not valid, IssuerUnavailable when its issuer could
        not be asked."""
        digest = hashlib.sha256(token.encode()).digest()  # the cache holds no token, only its hash
        cached = self._checked.get(digest)
        if cached is not None and cached[1] > time.time():
            return cached[0]
        caller, expiry = await self._check(token)
        if len(self._checked) >= _MAX_CACHED:
            now = time.time()
            self._checked = {k: v for k, v in self._checked.items() if v[1] > now}
            if len(self._checked) >= _MAX_CACHED:
                self._checked.clear()
        self._checked[digest] = (caller, expiry)
        return caller

    async def _check(self, token: str) -> tuple[Caller, float]:
        try:
            signed = jws.extract_compact(token.encode())
            unverified = json.loads(signed.payload)  # only to pick the issuer whose keys then check it
        except (JoseError, ValueError, UnicodeError):
            return await self._introspect(token)
        iss = unverified.get("iss") if isinstance(unverified, dict) else None
        entry = self._issuers.get(iss) if isinstance(iss, str) else None
        if entry is None:
            raise Unauthenticated("the access token is not from an issuer this service trusts")
        issuer, keys = entry
        kid = signed.headers().get("kid")
        try:
            if not jws.validate_compact(signed, await keys.keys(kid if isinstance(kid, str) else None), ALGORITHMS):
                raise Unauthenticated("the access token's signature does not verify with its issuer's keys")
            self._registry(issuer).validate(unverified)
        except UnsupportedAlgorithmError:
            raise Unauthenticated("the access token is signed with an algorithm this service does not accept") from None
        except ExpiredTokenError:
            raise Unauthenticated("the access token has expired") from None
        except (InvalidClaimError, MissingClaimError) as exc:
            raise Unauthenticated(f"the access token's {exc.claim!r} claim is missing or not valid here") from None
        except JoseError:
            raise Unauthenticated("the access token's signature does not verify with its issuer's keys") from None
        return self._caller_of(issuer, unverified), float(unverified["exp"])

    def _registry(self, issuer: OAuthIssuer) -> JWTClaimsRegistry:
        audiences = [issuer.audience] if issuer.audience else self._audiences
        return JWTClaimsRegistry(
            leeway=issuer.leeway_seconds,
            iss={"essential": True, "value": issuer.issuer},
            aud={"essential": True, "values": audiences},
            exp={"essential": True},
        )

    def _caller_of(self, issuer: OAuthIssuer, claims: dict[str, Any]) -> Caller:
        tenant = claims.get(issuer.tenant_claim)
        if not isinstance(tenant, str) or not _TENANT.match(tenant):
            raise Unauthenticated(f"the access token names no tenant (claim {issuer.tenant_claim!r})")
        granted = _scopes(claims)
        mapping = tuple((right, getattr(issuer.scopes, right.value)) for right in Right)
        rights = frozenset(right for right, scope in mapping if scope in granted)
        name = next((v for v in (claims.get(k) for k in ("client_id", "azp", "appid")) if isinstance(v, str)), None)
        return self._keyring.token_caller(tenant, rights, mapping, name)

    async def _introspect(self, token: str) -> tuple[Caller, float]:
        for issuer, keys in self._issuers.values():
            if not issuer.introspects():
                continue
            claims = await self._ask(issuer, keys, token)
            if claims is not None:
                return self._caller_of(issuer, claims), float(claims["exp"])
        raise Unauthenticated("the access token is not valid")

    async def _ask(self, issuer: OAuthIssuer, keys: IssuerKeys, token: str) -> dict[str, Any] | None:
        """The active token's claims, checked as a JWT's would be; None when the issuer does not know it."""
        endpoint = (await keys.metadata()).get("introspection_endpoint")
        if not isinstance(endpoint, str) or issuer.introspection_client_id is None:
            return None
        secret = issuer.introspection_client_secret.get_secret_value() if issuer.introspection_client_secret else ""
        try:
            response = await self._http.post(
                endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                auth=(issuer.introspection_client_id, secret),
            )
            claims = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            raise IssuerUnavailable(f"the introspection endpoint of {issuer.issuer} could not be read") from None
        if not isinstance(claims, dict) or claims.get("active") is not True:
            return None
        claims.setdefault("iss", issuer.issuer)
        try:
            self._registry(issuer).validate(claims)
        except JoseError:
            return None
        return claims


def _scopes(claims: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for name in ("scope", "scp", "roles"):  # roles: Entra ID's app-only tokens carry their grants there
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return found
