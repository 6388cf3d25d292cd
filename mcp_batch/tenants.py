"""API keys and tenants: the keys file, who a key belongs to, and what it may do.

The keys file (`MCP_BATCH_KEYS`, JSON) holds only SHA-256 hashes of keys, never the keys themselves:

    {"keys": [{"sha256": "<hex>", "tenant": "acme", "name": "ci", "servers": ["time", "docs"], "write": false,
               "max_calls_per_batch": 1000, "max_unfinished_items": 50000, "rate_share": 0.5, "proxy": true}]}

`servers` is a list of server names or "*"; `write` lets the key run write tools (`read_only: false`) and cancel
or delete its tenant's batches; `credentials` lets it set and delete the tenant's backend credentials; `admin` opens
the operator's routes (see `Right`); the ceilings
are the key's own, within the service's; `rate_share` is the fraction of each backend's rate limit the tenant's
calls may use together (all its keys share one bucket per backend); `proxy` lets the key see and call every
backend tool directly on the MCP door (`server__tool`, when the service turns the proxy on with MCP_BATCH_MCP_PROXY).

The optional `tenants` section holds what a tenant may do whichever way its callers sign in, key or token:

    {"keys": [...], "tenants": {"acme": {"servers": ["time"], "max_calls_per_batch": 500, "proxy": false,
                                         "rights": ["read", "write"]}}}

A key of the tenant gets the narrower of its own entry and its tenant's (servers in both, the lower ceiling, the
rights in both; `proxy` from either); a token gets its tenant's, its rights those its scopes grant within the
tenant's `rights`. A tenant not listed has every server, the service's ceilings, every right and no proxy.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_batch.errors import ConfigError, Forbidden, Problem
from mcp_batch.models import BatchRequest

KEY_PREFIX = "mcpb_"
DEFAULT_TENANT = "default"  # the one tenant when auth is off


class Right(StrEnum):
    """What a caller may do. A key has `read` always and the others as its keys-file entry says; a token has the
    rights its scopes map to (a token that maps to none may do nothing)."""

    read = "read"  # submit read-only batches; read, list and stream the tenant's own; answer its questions
    write = "write"  # write tools too (`read_only: false`), sampling answers, and what cannot be undone: cancel, delete
    credentials = "credentials"  # set, connect and delete the tenant's own credentials for backends (listing is `read`)
    admin = "admin"  # the operator's routes


ALL_RIGHTS = frozenset(Right)


class KeyEntry(BaseModel):
    """One line of the keys file."""

    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 (hex) of the key.")
    tenant: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.-]+$")
    name: str | None = Field(None, max_length=100, description="What the key is for (shown in logs).")
    servers: list[str] | Literal["*"] = "*"
    write: bool = False
    credentials: bool = Field(False, description="May set and delete the tenant's credentials for backends.")
    admin: bool = Field(False, description="May use the operator's routes.")
    max_calls_per_batch: int | None = Field(None, ge=1)
    max_unfinished_items: int | None = Field(None, ge=1)
    max_stored_bytes: int | None = Field(None, ge=1)
    rate_share: float | None = Field(None, gt=0, le=1)
    proxy: bool = Field(False, description="May list and call backend tools directly on the MCP door.")


class TenantEntry(BaseModel):
    """One tenant of the tenants section: the bounds of every caller of the tenant."""

    model_config = ConfigDict(extra="forbid")

    servers: list[str] | Literal["*"] = "*"
    rights: list[Right] = Field(default_factory=lambda: list(Right), description="The most any caller may have.")
    max_calls_per_batch: int | None = Field(None, ge=1)
    max_unfinished_items: int | None = Field(None, ge=1)
    max_stored_bytes: int | None = Field(None, ge=1)
    rate_share: float | None = Field(None, gt=0, le=1)
    proxy: bool = Field(False, description="Its callers may list and call backend tools directly on the MCP door.")


OPEN_TENANT = TenantEntry()


class KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[KeyEntry] = Field(default_factory=list)
    tenants: dict[str, TenantEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class Caller:
    """Who is asking, and what they may do."""

    tenant: str
    servers: frozenset[str] | None = None  # None: every server
    rights: frozenset[Right] = ALL_RIGHTS
    max_calls_per_batch: int | None = None
    max_unfinished_items: int | None = None
    max_stored_bytes: int | None = None
    rate_share: float | None = None
    name: str | None = None
    keyed: bool = True  # False only with auth off: there is no key, so no tenant to hold a team to
    proxy: bool = True  # the MCP door's proxied backend tools (keys get it only from the keys file)
    scopes: tuple[tuple[Right, str], ...] = ()  # a token's: the scope that grants each right, for a step-up hint
    key_sha256: str | None = None  # a key's: the SHA-256 of the key it presented (None for a token, or auth off)

    def scope_for(self, right: Right) -> str | None:
        """The scope a token caller would need for `right` (None for a key)."""
        return next((scope for granted, scope in self.scopes if granted is right), None)

    def may_call(self, server: str) -> bool:
        return self.servers is None or server in self.servers

    def may(self, right: Right) -> bool:
        return right in self.rights

    @property
    def holder(self) -> str:
        """Who holds what is counted per key across processes (open listens): its key's SHA-256; a token's (or auth
        off's) tenant and name, hashed the same way, so any of them may name a key."""
        return self.key_sha256 or hash_key(f"{self.tenant}\0{self.name or ''}")

    @property
    def write(self) -> bool:
        return Right.write in self.rights


ANYONE = Caller(DEFAULT_TENANT, keyed=False)  # auth off: one tenant that may do everything


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh key and its hash."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key)


class KeyRing:
    """The loaded keys file: key hash -> caller, and the tenants section."""

    def __init__(self, entries: list[KeyEntry], tenants: dict[str, TenantEntry] | None = None) -> None:
        self._tenants = tenants or {}
        self._callers = {e.sha256: self._key_caller(e, self.tenant(e.tenant)) for e in entries}

    def tenant(self, name: str) -> TenantEntry:
        """The tenant's bounds (an unlisted tenant's are open)."""
        return self._tenants.get(name, OPEN_TENANT)

    def has_keys(self) -> bool:
        return bool(self._callers)

    def caller(self, key: str) -> Caller | None:
        """The caller a presented key belongs to, or None."""
        return self._callers.get(hash_key(key))

    def token_caller(
        self, tenant: str, rights: frozenset[Right], scopes: tuple[tuple[Right, str], ...], name: str | None
    ) -> Caller:
        """The caller a valid token names: its tenant's bounds, the rights its scopes grant within them."""
        bounds = self.tenant(tenant)
        return Caller(
            tenant=tenant,
            servers=_servers(bounds.servers),
            rights=rights & frozenset(bounds.rights),
            max_calls_per_batch=bounds.max_calls_per_batch,
            max_unfinished_items=bounds.max_unfinished_items,
            max_stored_bytes=bounds.max_stored_bytes,
            rate_share=bounds.rate_share,
            name=name,
            proxy=bounds.proxy,
            scopes=scopes,
        )

    @staticmethod
    def _key_caller(e: KeyEntry, bounds: TenantEntry) -> Caller:
        own, shared = _servers(e.servers), _servers(bounds.servers)
        servers = own if shared is None else shared if own is None else own & shared
        return Caller(
            tenant=e.tenant,
            servers=servers,
            rights=key_rights(e) & frozenset(bounds.rights),
            max_calls_per_batch=_lower(e.max_calls_per_batch, bounds.max_calls_per_batch),
            max_unfinished_items=_lower(e.max_unfinished_items, bounds.max_unfinished_items),
            max_stored_bytes=_lower(e.max_stored_bytes, bounds.max_stored_bytes),
            rate_share=_lower(e.rate_share, bounds.rate_share),
            name=e.name,
            proxy=e.proxy or bounds.proxy,
            key_sha256=e.sha256,
        )


def _servers(listed: list[str] | Literal["*"]) -> frozenset[str] | None:
    return None if listed == "*" else frozenset(listed)


_N = TypeVar("_N", int, float)


def _lower(a: _N | None, b: _N | None) -> _N | None:
    return b if a is None else a if b is None else min(a, b)


def key_rights(entry: KeyEntry) -> frozenset[Right]:
    """A key's rights: `read` always, the rest as its entry says."""
    flags = {Right.write: entry.write, Right.credentials: entry.credentials, Right.admin: entry.admin}
    return frozenset({Right.read, *(right for right, on in flags.items() if on)})


def require(caller: Caller, right: Right, what: str) -> None:
    """Forbidden, naming the right, unless the caller has it; `what` says what was refused ("cancel a batch")."""
    if not caller.may(right):
        raise Forbidden(
            [Problem((), f"{what} needs the {right.value!r} right, which this caller does not have", "forbidden")],
            right.value,
        )


def load_keys(path: Path | None, required: bool = True) -> KeyRing:
    """Read and check the keys file; ConfigError names the entry and field at fault (never a hash). Not `required`
    (tokens only), a missing path is no keys and no tenants section."""
    if path is None:
        if not required:
            return KeyRing([])
        raise ConfigError("auth takes keys (MCP_BATCH_AUTH=keys) but MCP_BATCH_KEYS names no keys file")
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the keys file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the keys file {path} is not JSON (line {exc.lineno})") from None
    try:
        parsed = KeyFile.model_validate(raw)
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"the keys file {path} is invalid: {where}") from None
    hashes = [e.sha256 for e in parsed.keys]
    if len(set(hashes)) != len(hashes):
        raise ConfigError(f"the keys file {path} lists one key twice")
    return KeyRing(parsed.keys, parsed.tenants)


def authorize(caller: Caller, request: BatchRequest) -> None:
    """Refuse (Forbidden, naming each call) a batch this caller may not run; nothing is stored then."""
    problems = [
        Problem(("calls", index, "server"), f"this key may not call server {call.server!r}", "forbidden")
        for index, call in enumerate(request.calls)
        if not caller.may_call(call.server)
    ]
    if not request.read_only and not caller.write:
        problems.append(
            Problem(("read_only",), "this key may not run write tools (read_only must be true)", "forbidden")
        )
    if problems:
        raise Forbidden(problems, Right.write.value if not request.read_only and not caller.write else None)
