"""The OAuth parts of the store (`Store.oauth`): connect flows' pending states (sealed, single-use, expiring) and the
lock one worker holds while it refreshes a tenant's token, so a rotating refresh token is spent once."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable
from typing import cast

from redis.asyncio import Redis

from mcp_batch.keys import Keys

# KEYS: the lock. ARGV: the holder's token. Delete the lock only if this holder still has it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class OAuthStates:
    """Pending connect flows by their state's hash, and the refresh locks of tenants' credentials."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._release = redis.register_script(_RELEASE)

    async def put(self, state: str, sealed: bytes, ttl_seconds: int) -> None:
        await self.redis.set(self.keys.oauth_state(state), sealed, ex=ttl_seconds)

    async def take(self, state: str) -> bytes | None:
        """The pending record, removed as it is read: a second callback with the same state finds nothing."""
        return await cast(Awaitable[bytes | None], self.redis.getdel(self.keys.oauth_state(state)))

    async def lock(self, tenant: str, server: str, seconds: float) -> str | None:
        """Take the refresh lock of (tenant, server) for `seconds`; its holder token, or None when another has it."""
        token = secrets.token_hex(8)
        taken = await self.redis.set(self.keys.credential_lock(tenant, server), token, nx=True, px=int(seconds * 1000))
        return token if taken else None

    async def locked(self, tenant: str, server: str) -> bool:
        return bool(await self.redis.exists(self.keys.credential_lock(tenant, server)))

    async def unlock(self, tenant: str, server: str, token: str) -> None:
        await self._release(keys=[self.keys.credential_lock(tenant, server)], args=[token])

    async def get_machine(self, server: str) -> bytes | None:
        """The service's own sealed token for `server` (client credentials), shared by every worker."""
        return await cast(Awaitable[bytes | None], self.redis.get(self.keys.oauth_machine(server)))

    async def put_machine(self, server: str, sealed: bytes | None) -> None:
        if sealed is None:
            await self.redis.delete(self.keys.oauth_machine(server))
        else:
            await self.redis.set(self.keys.oauth_machine(server), sealed)

    async def get_client(self, server: str) -> bytes | None:
        """The sealed client registered dynamically for `server`'s authorization server, if any."""
        return await cast(Awaitable[bytes | None], self.redis.get(self.keys.oauth_client(server)))

    async def put_client(self, server: str, sealed: bytes) -> None:
        await self.redis.set(self.keys.oauth_client(server), sealed)
