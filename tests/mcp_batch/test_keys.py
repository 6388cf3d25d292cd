"""Key names and channels: channels carry the control plane's database, since pub/sub ignores database numbers."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.connection import _nodes
from tests.conftest import REDIS_URL


def test_channels_on_database_0_keep_their_plain_names_and_others_carry_the_number() -> None:
    assert Keys().done_channel == "mcpb:events:done"
    assert Keys("acme", 3).cancel_channel == "acme:3:events:cancel"
    assert Keys("acme", 3).batch("b1") == Keys("acme").batch("b1")  # keys live in their database already


def test_the_settings_name_the_control_planes_database_in_every_url_form() -> None:
    databases = {
        "redis://127.0.0.1:6379": 0,
        "redis://:secret@127.0.0.1:6379/7": 7,
        "rediss://h:1/2?ssl_cert_reqs=none": 2,
        "unix:///run/redis.sock?db=5": 5,
        "redis+sentinel://10.0.0.1:26380,[::1]:26381/primary/3": 3,
        "redis+sentinel://h:1/primary": 0,
    }
    for url, database in databases.items():
        assert Settings(redis_url=url).key_names.database == database, url


def test_a_cluster_url_may_list_an_ipv6_node_after_another() -> None:
    nodes, options = _nodes("redis+cluster://u:p%40ss@10.0.0.1:7000,[::1]:7001")
    assert nodes == [("10.0.0.1", 7000), ("::1", 7001)] and options == {"username": "u", "password": "p@ss"}


async def test_deployments_on_two_databases_of_one_redis_never_hear_each_others_messages() -> None:
    ours = Settings(redis_url=REDIS_URL).key_names
    other = Keys(ours.prefix, ours.database + 100)  # a database number only names the channel here
    async with aioredis.Redis.from_url(REDIS_URL) as redis, redis.pubsub() as pubsub:
        await pubsub.subscribe(ours.done_channel)
        await pubsub.get_message(timeout=5)  # the subscribe confirmation
        await redis.publish(other.done_channel, "theirs")
        await redis.publish(ours.done_channel, "ours")
        async with asyncio.timeout(5):
            message = None
            while message is None:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        assert message["data"] == b"ours"  # published after theirs, yet the first to arrive
