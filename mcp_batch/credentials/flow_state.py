"""A connect flow's state: what the callback needs to finish it, bound to the tenant and server that started it.

The state sent through the browser is a random nonce and a tag (HMAC under the service's key), so a state this
service never issued is refused before anything is looked up. The pending record is kept in Redis under the state's
hash, sealed, taken once (a replay finds nothing) and expires in minutes; it carries its own signature over the
nonce, tenant, server and expiry, so a record cannot be made to name another tenant or server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, SecretStr

from mcp_batch.credentials.record import OAuthClient

_TAG_BYTES = 16
STATE_SECONDS = 600  # how long a connect's authorization URL works


class PendingConnect(BaseModel):
    """One started connect flow, as kept until its callback."""

    model_config = ConfigDict(extra="forbid")

    tenant: str
    server: str
    verifier: SecretStr  # the PKCE code verifier
    redirect_uri: str
    client: OAuthClient
    expires_at: float
    signature: str


def state_key(secret: bytes) -> bytes:
    """The key states and pending records are signed with, derived from the service's secret."""
    return hmac.new(secret, b"mcp-batch oauth state", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _same(given: str, expected: str) -> bool:
    """A constant-time comparison that a caller's text cannot break: `compare_digest` refuses non-ASCII str."""
    return hmac.compare_digest(given.encode(), expected.encode())


def new_state(key: bytes) -> tuple[str, str]:
    """A fresh (state, nonce)."""
    nonce = _b64(secrets.token_bytes(32))
    return f"{nonce}.{_b64(hmac.new(key, nonce.encode(), hashlib.sha256).digest()[:_TAG_BYTES])}", nonce


def issued(key: bytes, state: str) -> str | None:
    """The state's nonce when this service issued it, else None."""
    nonce, _, tag = state.partition(".")
    expected = _b64(hmac.new(key, nonce.encode(), hashlib.sha256).digest()[:_TAG_BYTES])
    return nonce if nonce and _same(tag, expected) else None


def signature(key: bytes, nonce: str, tenant: str, server: str, expires_at: float) -> str:
    text = f"{len(tenant)}:{tenant}\n{len(server)}:{server}\n{nonce}\n{expires_at!r}"
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def pending(
    key: bytes, nonce: str, tenant: str, server: str, verifier: str, redirect_uri: str, client: OAuthClient
) -> PendingConnect:
    expires_at = time.time() + STATE_SECONDS
    return PendingConnect(
        tenant=tenant,
        server=server,
        verifier=SecretStr(verifier),
        redirect_uri=redirect_uri,
        client=client,
        expires_at=expires_at,
        signature=signature(key, nonce, tenant, server, expires_at),
    )


def genuine(key: bytes, nonce: str, record: PendingConnect) -> bool:
    """Whether the record was made for this nonce, with its tenant, server and expiry as they are."""
    expected = signature(key, nonce, record.tenant, record.server, record.expires_at)
    return hmac.compare_digest(record.signature, expected)


def sealable(model: BaseModel) -> bytes:
    """The model as JSON with its secrets in clear: only ever handed to the sealer."""

    def reveal(value: Any) -> Any:
        if isinstance(value, SecretStr):
            return value.get_secret_value()
        if isinstance(value, dict):
            return {k: reveal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [reveal(v) for v in value]
        return value

    return orjson.dumps(reveal(model.model_dump(mode="python")))


def ticket(key: bytes, tenant: str, server: str, expires_at: float) -> str:
    """A link's ticket that starts a connect of `server` for `tenant` until `expires_at`: what a URL-mode question
    names, so a browser, which carries no API key, can start the flow the tenant's batch waits on."""
    body = _b64(orjson.dumps({"t": tenant, "s": server, "e": round(expires_at)}))
    return f"{body}.{_ticket_tag(key, body)}"


def _ticket_tag(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, b"ticket\n" + body.encode(), hashlib.sha256).digest()[:_TAG_BYTES])


def ticket_holder(key: bytes, ticket_: str) -> tuple[str, str] | None:
    """The (tenant, server) a genuine ticket not past its time names, else None."""
    body, _, tag = ticket_.partition(".")
    if not body or not _same(tag, _ticket_tag(key, body)):
        return None
    data = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    if not isinstance(data, dict) or data.get("e", 0) <= time.time():
        return None
    return str(data["t"]), str(data["s"])
