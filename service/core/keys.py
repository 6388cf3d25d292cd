"""Every Redis key and channel the service uses, all under one prefix (default `mcpb`).

Per batch (all expire `retention_seconds` after the batch finishes, and are kept alive while it runs):
    {p}:batch:{id}            hash    the batch's settings, status, timestamps and counters
    {p}:batch:{id}:calls      list    one JSON call spec per item, in submitted order
    {p}:batch:{id}:results    hash    item index -> JSON result record, written once when the item finishes
    {p}:batch:{id}:failed     zset    failed item ids, scored by index (ordered failed_ids / failed_indexes)
    {p}:batch:{id}:finished   list    item indexes in finish order (position + 1 = the item's `seq`)
    {p}:batch:{id}:ids        hash    item id -> index
    {p}:idem:{sha256 of key}  string  an Idempotency-Key's JSON {batch_id, fingerprint} (named in the batch's meta)
Per backend:
    {p}:tools:{server}        string  cached tools/list (JSON), expires after `tools_refresh_seconds`
    {p}:rate:{server}         hash    GCRA state: theoretical arrival time per bucket (µs), `pause` after a 429
    {p}:leases:{server}       zset    concurrency leases, scored by expiry (ms); a dead worker's leases lapse
Shared:
    {p}:workers               zset    worker id -> its last heartbeat (ms); live workers decide how a batch is sharded
    {p}:queue                 zset    the arq queue of batch jobs (arq's own job keys live under `arq:`)
    {p}:events:done           channel a batch id, published once when that batch reaches a terminal status
    {p}:events:wake           channel published after each enqueue, so idle workers poll at once
    {p}:events:released       channel a server name, published when one of its leases is released
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """Key names for one deployment prefix."""

    prefix: str = "mcpb"

    def batch(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}"

    def calls(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:calls"

    def results(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:results"

    def failed(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:failed"

    def finished(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:finished"

    def ids(self, batch_id: str) -> str:
        return f"{self.prefix}:batch:{batch_id}:ids"

    def batch_keys(self, batch_id: str) -> list[str]:
        """All keys of one batch, in the order the store's scripts expect them."""
        b = batch_id
        return [self.batch(b), self.calls(b), self.results(b), self.failed(b), self.finished(b), self.ids(b)]

    def idempotency(self, key: str) -> str:
        """The record of a caller's Idempotency-Key, by its hash: header bytes never become a key name."""
        return f"{self.prefix}:idem:{hashlib.sha256(key.encode()).hexdigest()}"

    def tools(self, server: str) -> str:
        return f"{self.prefix}:tools:{server}"

    def rate(self, server: str) -> str:
        return f"{self.prefix}:rate:{server}"

    def leases(self, server: str) -> str:
        return f"{self.prefix}:leases:{server}"

    @property
    def workers(self) -> str:
        return f"{self.prefix}:workers"

    @property
    def queue(self) -> str:
        return f"{self.prefix}:queue"

    @property
    def done_channel(self) -> str:
        return f"{self.prefix}:events:done"

    @property
    def wake_channel(self) -> str:
        return f"{self.prefix}:events:wake"

    @property
    def released_channel(self) -> str:
        return f"{self.prefix}:events:released"
