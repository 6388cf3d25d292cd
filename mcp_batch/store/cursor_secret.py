"""The key cursors are signed with: derived from `MCP_BATCH_CURSOR_SECRET`, or a random one kept in Redis so that
every API and worker process sharing the Redis signs and verifies alike."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable
from typing import cast

from pydantic import SecretStr
from redis.asyncio import Redis

from mcp_batch.contract.item_cursors import CursorKey
from mcp_batch.keys import Keys


async def load_cursor_key(redis: Redis, keys: Keys, secret: SecretStr | None) -> CursorKey:
    """The configured secret's key; without one, the deployment's random key (made by the first process to ask)."""
    if secret is not None:
        return CursorKey(secret.get_secret_value().encode())
    await redis.set(keys.cursor_secret, secrets.token_hex(32), nx=True)
    stored = await cast(Awaitable[bytes | None], redis.get(keys.cursor_secret))
    if stored is None:  # removed between the two commands: try once more
        return await load_cursor_key(redis, keys, secret)
    return CursorKey(stored)
