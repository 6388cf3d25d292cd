"""What an operator looks at, read from Redis in two round trips: the workers' heartbeats, the arq queue, shard job
leases, unfinished items and each configured backend's leases and cached tool list. `/readyz`, the API's `/metrics`
and `mcp-batch status` read it here; workers write their heartbeat here.

Heartbeats are scored on Redis's clock (like shard job leases), so neither a worker's clock nor the clock of the
machine `mcp-batch status` runs on makes a live worker look dead. A worker silent for `FORGET_SECONDS` is dropped
from the set by the next heartbeat of any worker, so the set does not grow with the ids of stopped workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from mcp_batch.backends.servers_file import Registry
from mcp_batch.keys import Keys

FORGET_SECONDS = 300.0

# KEYS: the workers zset. ARGV: worker id, forget ms. Scores are Redis TIME in ms.
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
return now
"""


# KEYS: the workers zset. ARGV: seconds. Workers that beat within that long, on Redis's clock.
_LIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]) * 1000, '+inf')
"""


async def live_workers(redis: Redis, keys: Keys, within: float) -> int:
    """How many workers are live: they beat within `within` seconds, on Redis's clock (the one definition)."""
    # EVALSHA (the script's text only when Redis lacks it): a submit asks on its way to the 202.
    return int(await redis.register_script(_LIVE)(keys=[keys.workers], args=[repr(within)]))


class Heartbeat:
    """One worker's heartbeat: its id in the workers zset, scored now."""

    def __init__(self, redis: Redis, keys: Keys, worker_id: str) -> None:
        self._script = redis.register_script(_BEAT)
        self._key = keys.workers
        self.worker_id = worker_id

    async def beat(self) -> None:
        await self._script(keys=[self._key], args=[self.worker_id, int(FORGET_SECONDS * 1000)])


@dataclass(frozen=True)
class WorkerBeat:
    """A worker and how long ago it last beat."""

    id: str
    seconds_ago: float


@dataclass(frozen=True)
class BackendState:
    """A configured backend as the operator sees it: never its headers or env."""

    name: str
    transport: str
    timeout_seconds: float
    max_concurrency: int | None
    rate_limit: dict[str, float] | None
    leases_in_use: int  # concurrency leases held now, across all workers
    tools_cached: bool  # its tools/list is in Redis (fresh)


@dataclass(frozen=True)
class Overview:
    """One reading of the shared state."""

    workers: list[WorkerBeat]  # most recent heartbeat first
    queue_depth: int  # shard jobs in the arq queue, waiting or running
    job_leases: int  # shard job leases held (running jobs, and replacements queued)
    job_leases_lapsed: int  # of those, lapsed and not yet taken over
    unfinished_items: int
    backends: list[BackendState]

    def alive(self, within: float) -> list[WorkerBeat]:
        """The workers that beat within the last `within` seconds."""
        return [w for w in self.workers if w.seconds_ago <= within]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _beats(raw: list[tuple[Any, float]], now_ms: float) -> list[WorkerBeat]:
    beats = [WorkerBeat(_text(member), max(0.0, (now_ms - score) / 1000)) for member, score in raw]
    return sorted(beats, key=lambda w: w.seconds_ago)


async def _now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def workers(redis: Redis, keys: Keys) -> list[WorkerBeat]:
    """Every worker in the heartbeat set, most recent first."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.time()
        pipe.zrange(keys.workers, 0, -1, withscores=True)
        (seconds, micros), raw = await pipe.execute()
    return _beats(raw, int(seconds) * 1000 + int(micros) / 1000)


async def read(
    redis: Redis, keys: Keys, registry: Registry | None, default_timeout: float, data: Redis | None = None
) -> Overview:
    """Everything at once; `registry` None (the servers file could not be read) lists no backends. `redis` is the
    control plane, `data` the data plane (the backends' keys) when it is another Redis."""
    now = await _now_ms(redis)
    infos = [registry.info(name, default_timeout) for name in registry.names] if registry is not None else []
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrange(keys.workers, 0, -1, withscores=True)
        pipe.zcard(keys.queue)
        pipe.zcard(keys.jobs)
        pipe.zcount(keys.jobs, "-inf", now)  # the recovery sweep's test for a lapsed lease
        pipe.get(keys.unfinished)
        beats, queued, leases, lapsed, unfinished = await pipe.execute()
    per_backend: list[Any] = []
    if infos:
        data = redis if data is None else data
        data_now = now if data is redis else await _now_ms(data)  # lease expiries are on the data node's clock
        async with data.pipeline(transaction=False) as pipe:
            for info in infos:
                pipe.zcount(keys.leases(info.name), f"({data_now}", "+inf")  # unexpired leases
                pipe.exists(keys.tools(info.name))
            per_backend = await pipe.execute()
    backends = [
        BackendState(
            name=info.name,
            transport=info.transport,
            timeout_seconds=info.timeout_seconds,
            max_concurrency=info.max_concurrency,
            rate_limit=info.rate_limit,
            leases_in_use=int(per_backend[2 * i]),
            tools_cached=bool(per_backend[2 * i + 1]),
        )
        for i, info in enumerate(infos)
    ]
    return Overview(
        workers=_beats(beats, now),
        queue_depth=int(queued),
        job_leases=int(leases),
        job_leases_lapsed=int(lapsed),
        unfinished_items=int(unfinished or 0),
        backends=backends,
    )
