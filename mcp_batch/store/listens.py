"""Open task listens per API key, across every API process (`Store.listens`): the cap on MCP `subscriptions/listen`.

Each open listen holds a lease in its key's sorted set on the control plane (`Keys.listens`), scored by when it
lapses on that Redis's clock. Taking one drops the lapsed leases and counts the rest in one script, so two
processes never both take the last slot. The process serving a listen renews its lease while the listen lives and
drops it when the listen ends; a process killed without dropping them frees their slots once they lapse.
"""

from __future__ import annotations

from redis.asyncio import Redis

from mcp_batch.keys import Keys

# KEYS: 1 the holder's listens. ARGV: 1 listen id, 2 most open at once, 3 lease ms. Returns 1 (taken) or 0 (full).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""

# KEYS: 1 the holder's listens. ARGV: 1 listen id, 2 lease ms. A lease that lapsed meanwhile (the renewal came late)
# is taken again: the listen is still open, and counts again from now.
_RENEW = """
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], until_ms, ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2])) end
return 1
"""


class Listens:
    """Leases of open listens, per holder (an API key's SHA-256)."""

    def __init__(self, control: Redis, keys: Keys) -> None:
        self.control = control
        self.keys = keys
        self._take = control.register_script(_TAKE)
        self._renew = control.register_script(_RENEW)

    async def take(self, holder: str, listen_id: str, most: int, lease_seconds: float) -> bool:
        """Open a listen's lease unless its holder has `most` open already (False then)."""
        ms = int(lease_seconds * 1000)
        return bool(await self._take([self.keys.listens(holder)], [listen_id, most, ms]))

    async def renew(self, holder: str, listen_id: str, lease_seconds: float) -> None:
        """Keep an open listen's lease from lapsing for another `lease_seconds`."""
        await self._renew([self.keys.listens(holder)], [listen_id, int(lease_seconds * 1000)])

    async def drop(self, holder: str, listen_id: str) -> None:
        """The listen ended: its slot is free at once."""
        await self.control.zrem(self.keys.listens(holder), listen_id)

    async def open(self, holder: str) -> int:
        """How many listens the holder has open (leases not lapsed)."""
        seconds, micros = await self.control.time()
        now_ms = seconds * 1000 + micros // 1000
        return int(await self.control.zcount(self.keys.listens(holder), f"({now_ms}", "+inf"))
