"""A Redis managed by Sentinel, named by one URL: the client follows whichever node the sentinels call the primary.

    redis+sentinel://[user:password@]host:port[,host:port...]/<service>[/<db>]

The hosts are the sentinels (port 26379 when left out), `service` the name they monitor the primary under (their
`sentinel monitor <service> ...`), `db` the database (0). The user and password are the primary's and its replicas'
(the sentinels are asked without them). The URL is never logged or echoed in an error: it may hold a password.

After a failover, a connection to the old primary fails (or is told READONLY once it is a replica); redis-py's
Sentinel pool then asks the sentinels again and connects to the promoted primary. arq's pool gets the same through
`RedisSettings(sentinel=True, host=[sentinels], sentinel_master=service)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from arq.connections import RedisSettings
from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel

from mcp_batch.errors import ConfigError
from mcp_batch.redis_urls import scheme_of, split

SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
FORM = f"{SCHEME}://[user:password@]host:port[,host:port...]/<service>[/<db>]"


@dataclass(frozen=True)
class SentinelUrl:
    """A Sentinel URL's parts: the sentinels, the monitored service's name, the database and the nodes' credentials."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def is_sentinel_url(url: str) -> bool:
    return scheme_of(url) == SCHEME


def parse(url: str, setting: str = "MCP_BATCH_REDIS_URL") -> SentinelUrl:
    """The URL's parts; ConfigError naming the setting and what is wrong (never the URL: it may hold a password)."""
    parts = split(url)
    sentinels = [_address(entry, setting) for entry in parts.hosts.split(",")]
    path = [segment for segment in parts.path.split("/") if segment]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise ConfigError(f"{setting}: name the service the sentinels monitor, and a database number if any ({FORM})")
    db = int(path[1]) if len(path) == 2 else 0
    return SentinelUrl(sentinels, unquote(path[0]), db, parts.username, parts.password)


def _address(entry: str, setting: str) -> tuple[str, int]:
    """`host:port`, `host` or `[v6]:port`."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = entry.partition(":")
    if not host or not (port or str(SENTINEL_PORT)).isdigit():
        raise ConfigError(f"{setting}: a sentinel address is not host:port ({FORM})")
    return host, int(port or SENTINEL_PORT)


def arq_settings(url: str, setting: str = "MCP_BATCH_REDIS_URL") -> RedisSettings:
    """arq's connection settings for `url`: a Sentinel URL's sentinels and service, else `RedisSettings.from_dsn`."""
    if not is_sentinel_url(url):
        return RedisSettings.from_dsn(url)
    found = parse(url, setting)
    return RedisSettings(
        host=found.sentinels,  # arq takes the list of sentinels as its host
        sentinel=True,
        sentinel_master=found.service,
        database=found.db,
        username=found.username,
        password=found.password,
    )


def client(url: str, setting: str = "MCP_BATCH_REDIS_URL", **options: Any) -> Redis:
    """A redis-py client for `url` (`options`: socket timeouts and the like): the Sentinel-managed primary for a
    Sentinel URL, else `Redis.from_url`."""
    if not is_sentinel_url(url):
        plain: Redis = Redis.from_url(url, **options)
        return plain
    found = parse(url, setting)
    sentinels = Sentinel(found.sentinels, sentinel_kwargs={k: v for k, v in options.items() if k.startswith("socket")})  # type: ignore[no-untyped-call]
    primary: Redis = sentinels.master_for(
        found.service, db=found.db, username=found.username, password=found.password, **options
    )
    return primary


async def close_sentinels(client: Redis) -> None:
    """Close the connections a Sentinel-managed client (ours, or arq's pool) keeps to the sentinels: closing the
    client closes those to the primary only."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)  # a cluster has no pool
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()
