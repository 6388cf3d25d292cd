"""Where a new batch lives: its id is the hash tag of every key of it (keys.py), so the id picks the cluster master.

Random ids alone spread batches binomially (30 batches over 3 masters: one standard deviation is about 26 % of the
mean), and a batch's items all cost its master's CPU. So on a cluster each process takes the masters in turn, from a
random start, and draws random ids until one hashes to a slot of the master whose turn it is: a process's batches
land evenly, each process starting elsewhere. An id stays a uuid4's 122 random bits less the few its master fixes
(about log2 of the masters' count): as unguessable and as unique as any. On one Redis every id is as good as another.
"""

from __future__ import annotations

import random
import uuid

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

_DRAWS = 256  # ids tried for one master before taking any: a master that owns no slots cannot hold a batch


def new_batch_id() -> str:
    """A fresh, unguessable batch id."""
    return uuid.uuid4().hex


class Placement:
    """Batch ids for the data plane's layout: spread over a cluster's masters in turn."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._turn = random.randrange(1 << 30)  # a random start: processes begin with different masters

    def new_id(self) -> str:
        """A fresh batch id; on a cluster, one whose slot the next master in turn owns (by the client's slot map,
        which the client keeps current: a slot that moved, or a replica promoted, moves the turn with it)."""
        if not isinstance(self.redis, RedisCluster):
            return new_batch_id()
        slots = self.redis.nodes_manager.slots_cache
        masters = sorted(node.name for node in self.redis.get_primaries())
        if not slots or not masters:  # no slot map yet: the client has not reached the cluster
            return new_batch_id()
        target = masters[self._turn % len(masters)]
        self._turn += 1
        for _ in range(_DRAWS):
            batch_id = new_batch_id()
            owners = slots.get(key_slot(batch_id.encode()))
            if owners and owners[0].name == target:
                return batch_id
        return batch_id
