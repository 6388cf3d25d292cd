"""The secret cursors are signed with: `MCP_BATCH_CURSOR_SECRET`, or a random one kept in Redis so that every API and
worker process sharing the Redis signs and verifies alike (contract/item_cursors.py derives its key from it)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable
from typing import cast

from pydantic import SecretStr
from redis.asyncio import Redis

from mcp_batch.keys import Keys


async def cursor_secret(redis: Redis, keys: Keys, configured: SecretStr | None) -> bytes:
    """The configured secret; without one, the deployment's random one (made by the first process to ask)."""
    if configured is not None:
        return configured.get_secret_value().encode()
    await redis.set(keys.cursor_secret, secrets.token_hex(32), nx=True)
    stored = await cast(Awaitable[bytes | None], redis.get(keys.cursor_secret))
    if stored is None:  # removed between the two commands: try once more
        return await cursor_secret(redis, keys, configured)
    return stored
