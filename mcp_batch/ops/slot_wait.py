"""The wait before a write, sent where the claim was written: the data plane's Redis, or on a cluster the master that
holds the batch's slot (WAIT counts the replicas of the node it is sent on, and only what its connection wrote).

On a cluster the probe is the batch's own (`{p}:batch:{<id>}:probe`), written on a plain connection to the slot's
master, so the probe and the WAIT travel on one connection to the node that wrote the claim. After a failover the
cluster client's slot map names the promoted replica; until it does, the probe's MOVED fails the wait, and the call
is not sent (ReplicaWaitFailed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mcp_batch.keys import Keys

Guard = Callable[[Redis, str], Awaitable[None]]  # replication.WriteGuard: (the node's client, a probe key)


class SlotWait:
    """`guard` sent to the node that holds each batch's claims."""

    def __init__(self, guard: Guard, data: Redis, keys: Keys) -> None:
        self.guard, self.data, self.keys = guard, data, keys
        self._nodes: dict[str, Redis] = {}

    async def __call__(self, batch_id: str) -> None:
        if not isinstance(self.data, RedisCluster):
            await self.guard(self.data, self.keys.durability_probe)
            return
        probe = self.keys.batch_probe(batch_id)
        node = self.data.get_node_from_key(probe)
        client = self._nodes.get(node.name)
        if client is None:
            given = self.data.get_connection_kwargs()  # the cluster client's credentials and connect timeout
            options = {k: given.get(k) for k in ("username", "password", "socket_connect_timeout")}
            client = Redis(host=node.host, port=node.port, **options)
            self._nodes[node.name] = client
        await self.guard(client, probe)

    async def close(self) -> None:
        for client in self._nodes.values():
            await client.aclose()
