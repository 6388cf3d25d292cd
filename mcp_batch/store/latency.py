"""The call latency observed recently per backend, tool and tenant: a capped list per tool for each tenant, newest
first, which workers add to (a sample at a time, a second's worth in one pipeline) and the dry run's estimate reads
for its caller's tenant only, so no tenant can read how long another's calls take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from redis.asyncio import Redis

from mcp_batch.keys import Keys

SAMPLE = 50  # latencies kept per tool: enough for a steady mean, few enough to read in one LRANGE
_TTL_MS = 86_400_000  # a tool nobody called for a day has no recent latency


class Latencies:
    """The rolling latency sample of each backend's tools."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    async def add(self, samples: Mapping[tuple[str, str, str], Sequence[float]]) -> None:
        """Push each (server, tool, tenant)'s new latencies (seconds, oldest first) and cap its list, in one round
        trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for (server, tool, tenant), seconds in samples.items():
                key = self.keys.latency(server, tool, tenant)
                pipe.lpush(key, *(f"{value:.6f}" for value in seconds[-SAMPLE:]))
                pipe.ltrim(key, 0, SAMPLE - 1)
                pipe.pexpire(key, _TTL_MS)
            await pipe.execute()

    async def recent(self, tenant: str, tools: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[float]]:
        """The latencies of the tenant's calls kept for each (server, tool), newest first (an empty list: none
        observed yet)."""
        wanted = list(tools)
        async with self.redis.pipeline(transaction=False) as pipe:
            for server, tool in wanted:
                pipe.lrange(self.keys.latency(server, tool, tenant), 0, SAMPLE - 1)
            replies = await pipe.execute()
        return {pair: [float(v) for v in reply] for pair, reply in zip(wanted, replies, strict=True)}
