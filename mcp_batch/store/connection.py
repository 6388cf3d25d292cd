"""The one place that turns a Redis URL into a client: the control plane (arq's queue, the channels, the heartbeats)
and the data plane (each batch's, tenant's and backend's keys).

The control plane is one Redis, standalone or Sentinel-managed: arq cannot use a cluster (its enqueue is a WATCH
transaction over keys of several slots) and redis-py 5.3's asyncio `RedisCluster` has no pub/sub. The data plane may
be a Redis Cluster, named `redis+cluster://host:port[,host:port...]`; every data-plane script touches one slot
(keys.py's hash tags), so the same store code serves both. A URL of the wrong kind stops start-up with a message
naming the setting.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from arq import ArqRedis, create_pool
from arq.connections import RedisSettings
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError

from mcp_batch.errors import ConfigError
from mcp_batch.redis_urls import scheme_of, split
from mcp_batch.settings import Settings
from mcp_batch.store.sentinel import SCHEME as SENTINEL_SCHEME
from mcp_batch.store.sentinel import arq_settings, client, close_sentinels, is_sentinel_url

logger = logging.getLogger(__name__)

CLUSTER_SCHEME = "redis+cluster"
CONTROL_SETTING = "MCP_BATCH_REDIS_URL"
DATA_SETTING = "MCP_BATCH_DATA_REDIS_URL"

# A node that is gone (its host down, its packets dropped) costs this long to find out, not the OS's TCP timeout.
CONNECT_TIMEOUT = 5.0
_CONTROL_TRIES, _CONTROL_RETRY_DELAY = 6, 1.0  # as arq's own create_pool: five retries a second apart

Builder = Callable[[str, Settings, str], Awaitable[Redis]]  # (url, settings, the setting's name) -> a client


def is_cluster_url(url: str) -> bool:
    return scheme_of(url) == CLUSTER_SCHEME


async def _cluster_enabled(client: Redis) -> bool:
    info = await client.info("cluster")
    return bool(int(info.get("cluster_enabled", 0)))


async def _standalone(url: str, settings: Settings, setting: str) -> Redis:
    client: Redis = Redis.from_url(url)
    if await _cluster_enabled(client):
        await client.aclose()
        raise ConfigError(f"{setting} points at a Redis Cluster node; write it {CLUSTER_SCHEME}://host:port")
    return client


def _nodes(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    parts = split(url)
    options: dict[str, Any] = {}
    if parts.username or parts.password:
        options = {"username": parts.username, "password": parts.password}
    nodes = []
    for entry in parts.hosts.split(","):
        host, _, port = entry.rpartition(":")
        nodes.append((host.strip("[]") or "127.0.0.1", int(port or 6379)))
    return nodes, options


async def _cluster(url: str, settings: Settings, setting: str) -> Redis:
    nodes, options = _nodes(url)
    options["socket_connect_timeout"] = CONNECT_TIMEOUT
    probe: Redis = Redis(host=nodes[0][0], port=nodes[0][1], **options)
    try:
        enabled = await _cluster_enabled(probe)
    finally:
        await probe.aclose()
    if not enabled:
        raise ConfigError(f"{setting} names {CLUSTER_SCHEME}:// but its node is no Redis Cluster; write it redis://")
    client = RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in nodes], **options)
    await client.initialize()
    return cast(Redis, client)


async def _sentinel(url: str, settings: Settings, setting: str) -> Redis:
    return client(url, setting)


# How each scheme is opened; a new kind of deployment adds its scheme here.
BUILDERS: dict[str, Builder] = {
    "redis": _standalone,
    "rediss": _standalone,
    "unix": _standalone,
    SENTINEL_SCHEME: _sentinel,
}


async def connect(url: str, settings: Settings, setting: str = DATA_SETTING) -> Redis:
    """A client for `url` (standalone, or `redis+cluster://`), checked to be the kind of Redis the URL says."""
    scheme = scheme_of(url)
    if scheme == CLUSTER_SCHEME:
        return await _cluster(url, settings, setting)
    builder = BUILDERS.get(scheme)
    if builder is None:
        known = ", ".join(f"{name}://" for name in [*BUILDERS, CLUSTER_SCHEME])
        raise ConfigError(f"{setting} has an unknown scheme ({known})")
    return await builder(url, settings, setting)


def control_settings(settings: Settings) -> RedisSettings:
    """arq's connection settings for the control plane, MCP_BATCH_REDIS_URL (which cannot name a cluster)."""
    if is_cluster_url(settings.redis_url):
        raise ConfigError(
            f"{CONTROL_SETTING} cannot be a Redis Cluster (arq's queue and pub/sub need one Redis); "
            f"give the cluster as {DATA_SETTING}"
        )
    return arq_settings(settings.redis_url, CONTROL_SETTING)


async def check_control(pool: Redis) -> None:
    """ConfigError when the control plane's Redis is a cluster node (arq's transactions would fail with MOVED)."""
    if await _cluster_enabled(pool):
        raise ConfigError(
            f"{CONTROL_SETTING} points at a Redis Cluster node; the control plane needs one Redis (standalone or "
            f"Sentinel): give the cluster as {DATA_SETTING}={CLUSTER_SCHEME}://host:port"
        )


async def control_pool(settings: Settings) -> ArqRedis:
    """The control plane: arq's pool over MCP_BATCH_REDIS_URL, checked to be no cluster (tried again a few times
    while its Redis does not answer, as arq does)."""
    queue = settings.key_names.queue
    if not is_sentinel_url(settings.redis_url):
        pool = await create_pool(control_settings(settings), default_queue_name=queue)
    else:
        pool = await _sentinel_pool(settings, queue)
    try:
        await check_control(pool)
    except BaseException:
        await close(pool)
        raise
    return pool


async def _sentinel_pool(settings: Settings, queue: str) -> ArqRedis:
    # Built here, not by arq's create_pool: that drops a failed attempt's pool unclosed, and on a Sentinel URL its
    # connections to the sentinels stay open (a worker started mid-failover would leak them on every retry).
    control_settings(settings)  # the URL's checks
    attempt = 1
    while True:
        options = {"socket_connect_timeout": CONNECT_TIMEOUT, "redis_class": ArqRedis}
        pool = cast(ArqRedis, client(settings.redis_url, CONTROL_SETTING, **options))
        pool.job_serializer = pool.job_deserializer = None
        pool.default_queue_name = queue
        try:
            await pool.ping()
            return pool
        except (RedisError, OSError, TimeoutError) as exc:
            await close(pool)
            if attempt == _CONTROL_TRIES:
                raise
            logger.warning("the control plane's Redis did not answer (%s); trying again", type(exc).__name__)
        attempt += 1
        await asyncio.sleep(_CONTROL_RETRY_DELAY)


async def data_client(settings: Settings, control: Redis) -> Redis:
    """The data plane: MCP_BATCH_DATA_REDIS_URL's Redis, or the control plane's when it is unset."""
    if settings.data_redis_url is None:
        return control
    return await connect(settings.data_redis_url, settings)


async def close(redis: Redis) -> None:
    """Close a client, and a Sentinel-managed one's connections to the sentinels."""
    await redis.aclose()
    await close_sentinels(redis)


async def close_data(data: Redis, control: Redis) -> None:
    """Close the data plane's client, when it is not the control plane's."""
    if data is not control:
        await close(data)


def is_cluster(redis: Redis) -> bool:
    """Whether a data-plane client is a cluster's (no MULTI there: each slot's steps are scripts or plain pipelines)."""
    return isinstance(redis, RedisCluster)


def atomic(redis: Redis) -> bool:
    """The `transaction` argument of a pipeline whose commands touch one slot: MULTI where the client has it."""
    return not is_cluster(redis)


__all__ = [
    "BUILDERS",
    "atomic",
    "check_control",
    "close",
    "close_data",
    "connect",
    "control_pool",
    "control_settings",
    "data_client",
    "is_cluster",
    "is_cluster_url",
]
