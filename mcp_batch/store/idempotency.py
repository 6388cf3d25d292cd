"""`Idempotency-Key`: one batch per key, however often (or however concurrently) the same request is sent.

The key's record (`Keys.idempotency`) is a JSON string: `{"batch_id", "fingerprint"}` once the batch is stored,
`{"fingerprint", "token"}` (a placeholder) while the request that claimed it is storing it. Claiming is one
`SET NX`, so of two requests racing with one key exactly one creates a batch; the other waits for the placeholder
to become the winner's record and answers with that batch, or, when it is not done within `WAIT_SECONDS`, answers
that the first request is still in progress. A placeholder expires after `RESERVE_MS`, so a crashed API process
does not hold a key for ever; a create that fails releases it at once.

The final record expires with its batch: it takes the batch meta key's TTL when written, the batch meta names it
in its `idempotency_key` field, and the script that ends the batch (scripts.py `finalize`) re-expires it with the
batch's keys. A record whose batch is gone all the same is dropped, and the key is free again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from mcp_batch.errors import IdempotencyConflict, IdempotencyInProgress
from mcp_batch.keys import Keys

logger = logging.getLogger(__name__)

MAX_KEY_LENGTH = 200
RESERVE_MS = 60_000  # a placeholder's life: far longer than storing and queueing the largest batch takes
WAIT_SECONDS = 5.0  # how long a request finding a placeholder waits for the winner's batch
POLL_SECONDS = 0.05  # a rare race, so a short poll rather than a channel of its own

# KEYS: record. ARGV: placeholder, final record, the batch's remaining TTL (ms; read before, on the batch's slot).
# Write the final record over our own placeholder only (or where it lapsed and nobody took the key since),
# with the batch's remaining TTL, so the record and the batch expire together whichever is written first.
_COMPLETE = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: record. ARGV: the value to delete (never someone else's).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


KEY_PATTERN = rf"^[ -~]{{1,{MAX_KEY_LENGTH}}}$"  # what check_key takes, for the OpenAPI document


def check_key(value: str | None) -> str | None:
    """The header's rules: 1-200 printable ASCII characters (ValueError otherwise; None is no key)."""
    if value is None:
        return None
    if not 0 < len(value) <= MAX_KEY_LENGTH or not all(" " <= c <= "~" for c in value):
        raise ValueError(f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable ASCII characters")
    return value


def fingerprint(body: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a validated request (`model_dump(mode="json")`)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class KeyHold:
    """A claimed key: either the batch an earlier request made (`batch_id`), or the right to make it (`placeholder`)."""

    name: str
    fingerprint: str
    batch_id: str | None = None
    placeholder: str | None = None


class IdempotencyKeys:
    """The records of Idempotency-Keys (`Store.idempotency`)."""

    def __init__(self, redis: Redis, keys: Keys, live_ms: int) -> None:
        self.redis = redis
        self.keys = keys
        self.live_ms = live_ms

    async def claim(self, key: str, digest: str, tenant: str = "default") -> KeyHold:
        """Claim `key` for a request with this fingerprint, or find the batch it already made.

        IdempotencyConflict when the key was used with another request; IdempotencyInProgress when the first request
        with it is still storing its batch after `WAIT_SECONDS`.
        """
        redis, name = self.redis, self.keys.idempotency(key, tenant)
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            placeholder = json.dumps({"fingerprint": digest, "token": uuid.uuid4().hex})
            if await redis.set(name, placeholder, nx=True, px=RESERVE_MS):
                return KeyHold(name, digest, placeholder=placeholder)
            raw = await redis.get(name)
            if raw is not None:
                held = json.loads(raw)
                if held["fingerprint"] != digest:
                    raise IdempotencyConflict()
                batch_id = held.get("batch_id")
                if batch_id is not None:
                    if await redis.exists(self.keys.batch(batch_id)):
                        return KeyHold(name, digest, batch_id=batch_id)
                    await _release(redis, name, raw.decode())  # the batch is gone, so its key goes too: claim afresh
                    continue
            if time.monotonic() >= deadline:
                raise IdempotencyInProgress()
            await asyncio.sleep(POLL_SECONDS)

    async def complete(self, held: KeyHold, batch_id: str) -> None:
        """Turn our placeholder into the batch's record, expiring with the batch."""
        assert held.placeholder is not None
        final = json.dumps({"batch_id": batch_id, "fingerprint": held.fingerprint})
        ttl = await cast(Awaitable[int], self.redis.pttl(self.keys.batch(batch_id)))
        args = (held.placeholder, final, str(ttl if ttl > 0 else self.live_ms))
        written = await cast(Awaitable[int], self.redis.eval(_COMPLETE, 1, held.name, *args))
        if not written:
            # Only when storing took longer than RESERVE_MS and another request claimed the key meanwhile.
            logger.warning("Idempotency-Key reservation lapsed before batch %s was stored", batch_id)

    async def release(self, held: KeyHold) -> None:
        """Give up our placeholder (the batch could not be stored): the key is free again."""
        if held.placeholder is not None:
            await _release(self.redis, held.name, held.placeholder)


async def _release(redis: Redis, name: str, value: str) -> None:
    await cast(Awaitable[int], redis.eval(_RELEASE, 1, name, value))
