"""The only code that knows the Redis layout of a batch. `Store` is composed of parts, each owning its keys:

    submits       create a batch (all or nothing), delete one that could not be queued, count unfinished items
    claims        finish an item and claim the next in one round trip (the worker's hot path)
    reads         a page of a batch, one item, items in finish order, what a retry needs, waiting for the end
    leases        shard jobs' leases and take-over, cancel, deadlines
    tenants       who owns a batch, and each tenant's batches newest first
    idempotency   Idempotency-Key records
    webhooks      the completion webhooks' delivery queue
    queue         shard jobs into arq's queue and the wake after them, workers' heartbeats (the control plane)
    listens       each API key's open task listens on every API process, leased (the listen cap)
    deletion      deleting an ended batch whole
    questions     the questions backends wait on during a call, and the callers' answers
    latencies     the call latency observed recently per backend and tool (the dry run's estimate)
    backlog       what unfinished batches still ask of each backend (the dry run's estimate)
    progress      running items' latest progress
    repair        the tenants' unfinished counts reconciled with their living batches
    credentials   tenants' credentials for backends, sealed
    oauth         connect flows' pending states, refresh locks, registered clients, the service's own tokens

The hash fields are read only in batch_row.py and the Lua scripts (scripts.py). What the parts read they hand back
as plain data (typed rows, stored records as bytes); contract/document.py renders the document from it.
"""

from __future__ import annotations

from redis.asyncio import Redis

from mcp_batch.credentials.sealing import Sealer
from mcp_batch.keys import LIVE_TTL_SECONDS, Keys
from mcp_batch.settings import Settings
from mcp_batch.store.backlog import Backlog
from mcp_batch.store.channels import Listener
from mcp_batch.store.claims import Claims
from mcp_batch.store.credentials import Credentials
from mcp_batch.store.deletion import Deletion
from mcp_batch.store.ending import Ending
from mcp_batch.store.idempotency import IdempotencyKeys
from mcp_batch.store.latency import Latencies
from mcp_batch.store.leases import Leases
from mcp_batch.store.listens import Listens
from mcp_batch.store.oauth import OAuthStates
from mcp_batch.store.progress import Progress
from mcp_batch.store.questions import Questions
from mcp_batch.store.queue import JobQueue
from mcp_batch.store.reads import Reads
from mcp_batch.store.repair import Repair
from mcp_batch.store.submits import Submits
from mcp_batch.store.tenant_index import TenantIndex
from mcp_batch.store.webhook_queue import WebhookQueue

_WEBHOOK_LEASE_SECONDS = 60.0  # an attempt's claim: well past its timeout, so only a dead or frozen worker's lapses


_DEFAULTS = Settings.model_fields  # the keyword arguments' defaults are the settings' (tests build stores by hand)


class Store:
    """Batch persistence as composed parts, over the data plane's client (`redis`: a Redis or a cluster's) and the
    control plane's (`control`: arq's pool; the same Redis when unset). A process builds it `from_settings`."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        retention_seconds: int,
        done: Listener | None = None,
        response_max_bytes: int = _DEFAULTS["response_max_bytes"].default,
        lease_seconds: float = _DEFAULTS["lease_seconds"].default,
        outage_seconds: float = _DEFAULTS["redis_outage_seconds"].default,
        control: Redis | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        live_ms = LIVE_TTL_SECONDS * 1000
        lease_ms = int(lease_seconds * 1000)
        control = redis if control is None else control
        self.data, self.control = redis, control
        ending = Ending(redis, control, keys)
        self.submits = Submits(redis, keys, retention_seconds, response_max_bytes, lease_ms, live_ms, control)
        self.claims = Claims(redis, keys, live_ms, outage_seconds, ending)
        self.reads = Reads(redis, keys, done)
        self.leases = Leases(redis, keys, lease_ms, live_ms, control, ending)
        self.tenants = TenantIndex(redis, keys)
        self.idempotency = IdempotencyKeys(redis, keys, live_ms)
        self.webhooks = WebhookQueue(redis, keys, _WEBHOOK_LEASE_SECONDS, control)
        self.queue = JobQueue(control, keys)
        self.listens = Listens(control, keys)
        self.deletion = Deletion(redis, keys, control)
        self.questions = Questions(redis, keys)
        self.latencies = Latencies(redis, keys)
        self.backlog = Backlog(redis, keys, control)
        self.progress = Progress(redis, keys)
        self.repair = Repair(redis, keys, control)
        self.credentials = Credentials(redis, keys, sealer, control)
        self.oauth = OAuthStates(redis, keys)

    @classmethod
    def from_settings(
        cls, redis: Redis, settings: Settings, done: Listener | None = None, control: Redis | None = None
    ) -> Store:
        """The store of a process: every part given what the settings say (`done`: the API's listener, for waits;
        `redis` the data plane, `control` the control plane's arq pool, when they differ)."""
        return cls(
            redis,
            settings.key_names,
            settings.retention_seconds,
            done,
            settings.response_max_bytes,
            settings.lease_seconds,
            settings.redis_outage_seconds,
            control,
            Sealer.from_setting(settings.secrets_keys),
        )


__all__ = ["Store"]
