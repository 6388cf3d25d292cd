"""Tenants' credentials for backends (`Store.credentials`): one hash per tenant, server -> the sealed record.

The whole record (kind, values, times, scopes) is sealed as one JSON value, bound to its tenant and server, so Redis
holds nothing readable. A set of the tenants that hold any lets `rotate` re-seal everything under the first key. A
tenant's change (put, delete) is published on the control plane, so workers' sessions check their credential at once.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import cast

import orjson
from pydantic import SecretStr
from redis.asyncio import Redis

from mcp_batch.credentials.record import Credential
from mcp_batch.credentials.sealing import Sealer
from mcp_batch.errors import ConfigError
from mcp_batch.keys import Keys

# KEYS: the tenant's hash. ARGV: server, the sealed value read, the value to write. 1: replaced; 0: it changed since.
_SWAP = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


class Credentials:
    """Get, put, delete and list a tenant's credentials, sealed at rest; re-seal them all under the first key."""

    def __init__(self, redis: Redis, keys: Keys, sealer: Sealer | None, control: Redis | None = None) -> None:
        self.redis = redis
        self.control = redis if control is None else control
        self.keys = keys
        self._sealer_or_none = sealer
        self._swap = redis.register_script(_SWAP)

    @property
    def configured(self) -> bool:
        """Whether a secrets key is configured (without one, nothing can be stored)."""
        return self._sealer_or_none is not None

    @property
    def sealer(self) -> Sealer:
        if self._sealer_or_none is None:
            raise ConfigError("no secrets key is configured: set MCP_BATCH_SECRETS_KEYS")
        return self._sealer_or_none

    def seal(self, tenant: str, server: str, credential: Credential) -> bytes:
        return self.sealer.seal(_dump(credential), tenant, server)

    def open(self, tenant: str, server: str, sealed: bytes) -> Credential:
        """The record of a sealed value (SealBroken when no key opens it)."""
        return Credential.model_validate_json(self.sealer.open(sealed, tenant, server))

    async def get_sealed(self, tenant: str, server: str) -> bytes | None:
        """The stored value as it is, unopened (a worker compares it to the one its session holds)."""
        return await cast(Awaitable[bytes | None], self.redis.hget(self.keys.credentials(tenant), server))

    async def get(self, tenant: str, server: str) -> Credential | None:
        sealed = await self.get_sealed(tenant, server)
        return None if sealed is None else self.open(tenant, server, sealed)

    async def put(self, tenant: str, server: str, credential: Credential) -> None:
        sealed = self.seal(tenant, server, credential)
        await cast(Awaitable[int], self.redis.hset(self.keys.credentials(tenant), server, sealed))  # type: ignore[arg-type]
        await cast(Awaitable[int], self.redis.sadd(self.keys.credential_tenants, tenant))
        await self.changed(tenant)

    async def changed(self, tenant: str) -> None:
        """Tell every worker that `tenant`'s credentials changed (its open sessions compare theirs at once)."""
        await self.control.publish(self.keys.credentials_channel, tenant)

    async def replace(self, tenant: str, server: str, read: bytes, credential: Credential) -> bool:
        """Store `credential` only if the stored value is still `read` (False: someone changed it meanwhile)."""
        sealed = self.seal(tenant, server, credential)
        return bool(await self._swap(keys=[self.keys.credentials(tenant)], args=[server, read, sealed]))

    async def delete(self, tenant: str, server: str) -> Credential | None:
        """Remove the tenant's credential for `server`; the record removed (its grant to revoke), or None."""
        key = self.keys.credentials(tenant)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hget(key, server)
            pipe.hdel(key, server)
            sealed, _ = await pipe.execute()
        if sealed is None:
            return None
        await self.changed(tenant)
        try:
            return self.open(tenant, server, sealed)
        except Exception:  # removed all the same: a value no key opens has no grant anyone could revoke
            return None

    async def list(self, tenant: str) -> dict[str, Credential]:
        """The tenant's credentials by server, in server order."""
        stored = await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(self.keys.credentials(tenant)))
        return {name.decode(): self.open(tenant, name.decode(), sealed) for name, sealed in sorted(stored.items())}

    async def rotate(self) -> int:
        """Re-seal every stored credential under the first key; how many were re-sealed. A value changed meanwhile
        (a refresh, a new secret) is left: it was sealed under the first key by whoever wrote it."""
        count = 0
        tenants = await cast(Awaitable[set[bytes]], self.redis.smembers(self.keys.credential_tenants))
        for raw in sorted(tenants):
            tenant = raw.decode()
            stored = await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(self.keys.credentials(tenant)))
            for name, sealed in stored.items():
                if self.sealer.sealed_under_first(sealed):
                    continue
                server = name.decode()
                count += await self.replace(tenant, server, sealed, self.open(tenant, server, sealed))
        return count


def _dump(credential: Credential) -> bytes:
    """The record as JSON with its secrets in clear: only ever handed to the sealer."""
    data = credential.model_dump(mode="python")
    for holder in (data, data.get("client") or {}):
        for field, value in holder.items():
            if isinstance(value, SecretStr):
                holder[field] = value.get_secret_value()
    return orjson.dumps(data)
