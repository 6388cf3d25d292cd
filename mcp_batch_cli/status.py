"""`mcp-batch status`: the operator's view at a glance, read from Redis directly, not through the API: workers and
their heartbeats, the queue, shard job leases, unfinished items and each configured backend.

Redis (and the servers file) are MCP_BATCH_REDIS_URL's (MCP_BATCH_SERVERS'), else those of the `mcp-batch dev`
running on this machine (discovery.py), else the defaults; the report says which.

Nothing secret is printed: the Redis URL without its password, backends without their headers or env; so the
servers file is read without the backends' credentials (a `${VAR}` the operator's environment lacks reads as empty).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redis.exceptions import RedisError

from mcp_batch.backends.servers_file import Registry, load_servers
from mcp_batch.errors import ConfigError
from mcp_batch.ops import durability
from mcp_batch.ops.durability import Durability
from mcp_batch.settings import Settings
from mcp_batch.store import connection, overview, sentinel
from mcp_batch.store.overview import BackendState, Overview
from mcp_batch_cli.discovery import running_dev, state_file

_TIMEOUT_SECONDS = 5.0  # a Redis that does not answer within this is reported unreachable


@dataclass(frozen=True)
class Status:
    """What `status` found; `ok` when Redis answered and at least one worker is alive."""

    redis: str  # where, without credentials
    redis_error: str | None
    servers_error: str | None
    overview: Overview | None
    alive_within: float
    source: str = "MCP_BATCH_REDIS_URL"  # where the Redis URL came from
    durability: Durability | None = None

    @property
    def ok(self) -> bool:
        return self.overview is not None and bool(self.overview.alive(self.alive_within))


class _Placeholders(Mapping[str, str]):
    """The environment, where every variable it lacks reads as empty."""

    def __getitem__(self, name: str) -> str:
        return os.environ.get(name, "")

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(os.environ)

    def __len__(self) -> int:
        return len(os.environ)


def redacted(url: str) -> str:
    """A Redis URL without its user and password."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def operator_settings() -> tuple[Settings, str]:
    """The settings to read, and where their Redis URL came from."""
    if os.environ.get("MCP_BATCH_REDIS_URL"):
        return Settings(), "MCP_BATCH_REDIS_URL"
    dev = running_dev()
    if dev is not None and dev.redis_url:
        settings = Settings(redis_url=dev.redis_url)
        if dev.servers and not os.environ.get("MCP_BATCH_SERVERS"):
            settings = settings.model_copy(update={"servers": Path(dev.servers)})
        return settings, f"the running mcp-batch dev (pid {dev.pid})"
    return Settings(), f"the default: no MCP_BATCH_REDIS_URL, and no running mcp-batch dev in {state_file()}"


async def gather(settings: Settings, source: str = "MCP_BATCH_REDIS_URL") -> Status:
    registry: Registry | None = None
    servers_error = None
    try:
        registry = load_servers(settings.servers, _Placeholders())
    except ConfigError as exc:  # the rest is still worth showing
        servers_error = str(exc)
    where = redacted(settings.redis_url)
    redis = sentinel.client(
        settings.redis_url, socket_timeout=_TIMEOUT_SECONDS, socket_connect_timeout=_TIMEOUT_SECONDS
    )
    data = redis
    try:
        async with asyncio.timeout(_TIMEOUT_SECONDS):
            data = await connection.data_client(settings, redis)
            keys = settings.key_names
            state = await overview.read(redis, keys, registry, settings.default_timeout_seconds, data)
            persistence = await durability.read(data, settings)
    except (RedisError, OSError, ConfigError) as exc:  # OSError includes the timeout
        return Status(where, type(exc).__name__, servers_error, None, settings.ready_worker_seconds, source)
    finally:
        await connection.close_data(data, redis)
        await connection.close(redis)
    return Status(where, None, servers_error, state, settings.ready_worker_seconds, source, persistence)


def as_json(status: Status) -> dict[str, Any]:
    o = status.overview
    body: dict[str, Any] = {
        "ok": status.ok,
        "redis": {"url": status.redis, "error": status.redis_error},
        "redis_from": status.source,
    }
    if status.servers_error:
        body["servers_error"] = status.servers_error
    if o is None:
        return body
    return body | {
        "workers": [
            {
                "id": w.id,
                "seconds_since_heartbeat": round(w.seconds_ago, 3),
                "alive": w.seconds_ago <= status.alive_within,
            }
            for w in o.workers
        ],
        "queue_depth": o.queue_depth,
        "job_leases": {"held": o.job_leases, "lapsed": o.job_leases_lapsed},
        "unfinished_items": o.unfinished_items,
        "backends": [asdict(b) for b in o.backends],
        "durability": status.durability.as_dict() if status.durability else None,
    }


def as_text(status: Status) -> str:
    o = status.overview
    lines = [f"redis      {status.redis}  " + (f"UNREACHABLE ({status.redis_error})" if o is None else "ok")]
    lines.append(f"           from {status.source}")
    if o is not None:
        alive = len(o.alive(status.alive_within))
        lines.append(
            f"workers    {alive} alive, {len(o.workers) - alive} stale (alive: a heartbeat within "
            f"{status.alive_within:g}s)"
        )
        lines += _table(
            ["id", "heartbeat", "state"],
            [
                [w.id, f"{w.seconds_ago:.1f}s ago", "alive" if w.seconds_ago <= status.alive_within else "stale"]
                for w in o.workers
            ],
        )
        lines.append(f"queue      {o.queue_depth} shard jobs queued or running")
        lines.append(f"leases     {o.job_leases} shard job leases held, {o.job_leases_lapsed} lapsed")
        lines.append(f"items      {o.unfinished_items} unfinished")
        if status.durability is not None:
            repeat = (
                "writes may repeat after a host crash" if status.durability.writes_may_repeat else "no write repeats"
            )
            lines.append(f"durability {status.durability.mode}: {repeat}")
            d = status.durability
            wait = "writes may repeat after a failover" if d.writes_may_repeat_after_failover else "no write repeats"
            lines.append(f"replicas   {d.replicas} online, claims of writes wait for: {d.replica_wait}: {wait}")
        lines.append(f"backends   {len(o.backends)}")
        lines += _table(
            ["name", "transport", "timeout", "max_concurrency", "rate_limit", "leases", "tools"],
            [_backend_row(b) for b in o.backends],
        )
    if status.servers_error:
        lines.append(f"servers    {status.servers_error}")
    if o is not None and not status.ok:
        lines.append("NOT READY: no live worker")
    return "\n".join(lines)


def _backend_row(b: BackendState) -> list[str]:
    rate = ", ".join(f"{k}={v:g}" for k, v in (b.rate_limit or {}).items()) or "-"
    leases = f"{b.leases_in_use}/{b.max_concurrency}" if b.max_concurrency else str(b.leases_in_use)
    return [
        b.name,
        b.transport,
        f"{b.timeout_seconds:g}s",
        str(b.max_concurrency or "-"),
        rate,
        leases,
        "cached" if b.tools_cached else "not cached",
    ]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Rows under a header, columns aligned, indented under the section's name."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
