"""Every Redis key and channel the service uses, all under one prefix (default `mcpb`).

Keys in braces carry a hash tag: on a Redis Cluster every key with the same tag sits in one slot, so each Lua script
touches one slot (the data plane, connection.py). A batch's keys carry its id, a backend's its name, a tenant's its
name; `_tagged` builds them all, so a key added to a batch gets the tag by being built there.

Data plane (MCP_BATCH_DATA_REDIS_URL; a cluster or the control plane's Redis):
Per batch, tag = the batch id (all expire the batch's `retention_seconds` after it finishes; until then they live
LIVE_TTL_SECONDS past the last sign of life: a submit, a finished item, a lease renewal):
    {p}:batch:{id}            hash    the batch's settings, status, timestamps and counters; `lease:<job>` is the
                                      lease expiry of each shard job (ms, the node's clock), the truth a claim checks
    {p}:batch:{id}:calls      list    one JSON call spec per item, in submitted order
    {p}:batch:{id}:results    hash    item index -> JSON result record, written once when the item finishes
    {p}:batch:{id}:failed     zset    failed item ids, scored by index (ordered failed_ids / failed_indexes)
    {p}:batch:{id}:finished   list    item indexes in finish order (position + 1 = the item's `seq`)
    {p}:batch:{id}:ids        hash    item id -> index
    {p}:batch:{id}:inflight   hash    item index -> the shard job running it (claimed, not yet finished)
    {p}:batch:{id}:orphans    list    `index:flag` of items taken back from a stopped worker, run first
                                      (flag 1: it may have reached its backend; 0: it surely did not)
    {p}:batch:{id}:probe      string  a worker's write before WAIT/WAITAOF on the batch's node; expires in a minute
    {p}:batch:{id}:questions  hash    item index -> JSON question a backend is waiting on (its input request)
    {p}:batch:{id}:answers    hash    item index -> JSON answer, until the waiting worker takes it
                                      (both expire a while after the wait they serve: not in `batch_keys`)
    {p}:batch:{id}:progress   hash    item index -> JSON latest progress of a running item (its worker deletes
                                      it when the call ends; expires PROGRESS_TTL_SECONDS after its last write)
    {p}:idem:{sha256}         string  an Idempotency-Key's JSON {batch_id, fingerprint} (named in the batch's meta)
Per backend, tag = the server's name:
    {p}:tools:{server}        string  cached tools/list (JSON), expires after `tools_refresh_seconds`
    {p}:tools:{server}:tenant:{t}  string  the tools/list a tenant's own credential gets (JSON, with the hash of
                                      the sealed credential it was listed with); expires after TENANT_TOOLS_TTL_SECONDS
    {p}:rate:{server}         hash    GCRA state: theoretical arrival time per bucket (µs), `pause` after a 429
    {p}:leases:{server}       zset    concurrency leases, scored by expiry (ms); a dead worker's leases lapse
    {p}:rate:{server}:tenant:{t}  hash  GCRA state of one tenant's share of the backend's rate (keys' rate_share)
    {p}:priority:{server}:tenant:{t}  hash  one tenant's priorities on the backend: `job:{rank}:{job}` -> until when
                                      (ms) a shard job of that rank runs; `tat:{rank}`, the GCRA state of a rank's
                                      minimum share while a higher one runs (backends/priority.py)
    {p}:latency:{server}:{tool}:tenant:{t}  list  the latest latencies (seconds) of one tenant's calls of one tool,
                                        newest first, capped
Per tenant, tag = the tenant:
    {p}:tenant:{t}:batches    zset    the tenant's batch ids, scored by creation (µs): GET /v1/batches, newest first
    {p}:tenant:{t}:unfinished string  the tenant's items of unfinished batches not yet finished (its key's ceiling)
    {p}:tenant:{t}:stored_bytes  string  the bytes of the stored calls of the tenant's batches (its byte ceiling)
    {p}:tenant:{t}:stored_sizes  hash    batch id -> the bytes of its stored calls, until they are released
    {p}:tenant:{t}:stored_until  zset    batch id -> when its bytes are released (ms, the node's clock): when its
                                         keys expire; each submit releases those whose time has come
    {p}:tenant:{t}:meta:{sha256}  zset    the tenant's batch ids with one metadata pair (the hash of its key and
                                         value), scored as its batches: a listing filtered by that pair
    {p}:credentials:{t}       hash    server -> the tenant's credential for it, sealed whole (credentials/sealing.py:
                                      AES-256-GCM, the tenant and server as associated data); no TTL
    {p}:credentials:{t}:lock:{server}  string  held while one worker refreshes the tenant's OAuth token for the
                                      server, so a rotating refresh token is spent once; expires on its own
Per OAuth flow and machine identity:
    {p}:oauth-state:{sha256}  string  a connect flow's pending state (sealed), by the state's hash; single-use,
                                      expires in minutes
    {p}:oauth-machine:{server}  string  the service's own client-credentials token for the server (sealed)
    {p}:oauth-client:{server}  string  the client registered dynamically (RFC 7591) at the server's authorization
                                      server, with the redirect URI it was registered for (sealed): reused by every
                                      tenant's connect
    {p}:credential-tenants    set     tenants that hold credentials (what `mcp-batch credentials rotate` walks)
Control plane (MCP_BATCH_REDIS_URL: one Redis, standalone or Sentinel; a few commands per shard job, none per item):
    {p}:jobs                  zset    shard job id -> its lease expiry (ms, this Redis's clock): the index the
                                      recovery sweep reads; the batch's `lease:<job>` decides
    {p}:deadlines             zset    batch id -> its deadline (ms), for batches that set one
    {p}:unfinished            string  items of unfinished batches not yet finished (backpressure)
    {p}:webhooks              zset    batch id -> when its completion webhook is next due (ms; 0: now)
    {p}:durability:probe      string  a worker's write before WAIT / WAITAOF (replicas, disk) on the data plane's
                                      Redis when it is no cluster (on a cluster: the batch's probe); expires in a minute
    {p}:workers               zset    worker id -> its last heartbeat (ms); live workers decide how a batch is sharded
    {p}:cursor-secret         string  the random key cursors are signed with when MCP_BATCH_CURSOR_SECRET is unset
    {p}:queue                 zset    the arq queue of batch jobs (arq's own job keys live under `arq:`)
    {p}:listens:{sha256}      zset    one API key's open task listens (MCP `subscriptions/listen`) on every API
                                      process: listen id -> its lease's expiry (ms, this Redis's clock); a lease
                                      not renewed (its process died) lapses, and the key expires with its last one
Channels are the server's, not a database's (pub/sub ignores the database number), so on a database other than 0
they carry its number, `{p}:<db>:events:...`: deployments that share a Redis on different databases never hear each
other's messages.

    {p}:events:done           channel a batch id, published once when that batch reaches a terminal status,
                                      then `WEBHOOK_DUE` when it has a webhook to send (only the senders wake)
    {p}:events:wake           channel published after each enqueue, so idle workers poll at once
    {p}:events:released       channel a server name, published when one of its leases is released
    {p}:events:cancel         channel a batch id, published when the batch is cancelled
    {p}:events:credentials    channel a tenant, published when it sets or deletes a credential (sessions re-check)
arq's own keys (its prefix, not ours): `arq:job:{job}` (the queued job) and `arq:in-progress:{job}`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from arq.constants import in_progress_key_prefix, job_key_prefix

WEBHOOK_DUE = "webhook"  # the done channel's message after a batch with a webhook ends (never a batch id: not hex)
LIVE_TTL_SECONDS = 7 * 86_400  # an unfinished batch nobody works on any more is dropped after this
TENANT_TOOLS_TTL_SECONDS = 60  # a tenant's tool list, listed with its own credential, is asked again after this
PROGRESS_TTL_SECONDS = 3_600  # a running item's progress outlives its last write by this much (a dead worker's)

_BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_batch_id(value: str) -> bool:
    """Whether `value` can name a batch (batch ids are 32 hex digits). A caller's id that cannot is no batch: it
    must never reach a key name, where `<id>:calls` would name another key of batch `<id>`."""
    return _BATCH_ID.fullmatch(value) is not None


@dataclass(frozen=True)
class Keys:
    """Key names for one deployment prefix; `database`, the control plane's database, scopes the channels."""

    prefix: str = "mcpb"
    database: int = 0

    def _channel(self, name: str) -> str:
        scope = f"{self.prefix}:{self.database}" if self.database else self.prefix
        return f"{scope}:events:{name}"

    def _tagged(self, kind: str, tag: str, rest: str = "") -> str:
        """`{p}:<kind>:{<tag>}<rest>`: every key of one batch, backend or tenant hashes to one cluster slot."""
        return f"{self.prefix}:{kind}:{{{tag}}}{rest}"

    def batch(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id)

    def calls(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":calls")

    def results(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":results")

    def failed(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":failed")

    def finished(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":finished")

    def ids(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":ids")

    def inflight(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":inflight")

    def orphans(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":orphans")

    def batch_probe(self, batch_id: str) -> str:
        """A worker's write before it waits for replicas or the disk: on the node that holds the batch's slot."""
        return self._tagged("batch", batch_id, ":probe")

    def questions(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":questions")

    def answers(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":answers")

    def progress(self, batch_id: str) -> str:
        return self._tagged("batch", batch_id, ":progress")

    def batch_keys(self, batch_id: str) -> list[str]:
        """All keys of one batch, in the order the store's scripts expect them."""
        b = batch_id
        return [
            self.batch(b),
            self.calls(b),
            self.results(b),
            self.failed(b),
            self.finished(b),
            self.ids(b),
            self.inflight(b),
            self.orphans(b),
        ]

    @property
    def jobs(self) -> str:
        return f"{self.prefix}:jobs"

    @property
    def deadlines(self) -> str:
        return f"{self.prefix}:deadlines"

    @property
    def unfinished(self) -> str:
        return f"{self.prefix}:unfinished"

    @property
    def webhooks(self) -> str:
        return f"{self.prefix}:webhooks"

    @staticmethod
    def arq_job(job: str) -> str:
        return job_key_prefix + job

    @staticmethod
    def arq_in_progress(job: str) -> str:
        return in_progress_key_prefix + job

    def idempotency(self, key: str, tenant: str = "default") -> str:
        """The record of a tenant's Idempotency-Key, by its hash: header bytes never become a key name, and two
        tenants' equal keys are two keys."""
        digest = hashlib.sha256(f"{tenant}\n{key}".encode()).hexdigest()
        return self._tagged("idem", digest)

    def tools(self, server: str) -> str:
        return self._tagged("tools", server)

    def tenant_tools(self, server: str, tenant: str) -> str:
        return self._tagged("tools", server, f":tenant:{tenant}")

    def rate(self, server: str) -> str:
        return self._tagged("rate", server)

    def tenant_rate(self, server: str, tenant: str) -> str:
        return self._tagged("rate", server, f":tenant:{tenant}")  # on its backend's slot

    def priority(self, server: str, tenant: str) -> str:
        return self._tagged("priority", server, f":tenant:{tenant}")  # on its backend's slot

    def latency(self, server: str, tool: str, tenant: str) -> str:
        return self._tagged("latency", server, f":{tool}:tenant:{tenant}")  # a tenant's own: no one reads another's

    def tenant_batches(self, tenant: str) -> str:
        return self._tagged("tenant", tenant, ":batches")

    def tenant_metadata(self, tenant: str, key: str, value: str) -> str:
        """The index of a tenant's batches tagged `key` = `value`, by the pair's hash (the key's length first, so no
        two pairs hash one text): a caller's strings never become a key name."""
        digest = hashlib.sha256(f"{len(key)}:{key}{value}".encode()).hexdigest()
        return self._tagged("tenant", tenant, f":meta:{digest}")

    def tenant_unfinished(self, tenant: str) -> str:
        return self._tagged("tenant", tenant, ":unfinished")

    @property
    def durability_probe(self) -> str:
        return f"{self.prefix}:durability:probe"

    def tenant_stored_bytes(self, tenant: str) -> str:
        return self._tagged("tenant", tenant, ":stored_bytes")

    def tenant_stored_sizes(self, tenant: str) -> str:
        return self._tagged("tenant", tenant, ":stored_sizes")

    def tenant_stored_until(self, tenant: str) -> str:
        return self._tagged("tenant", tenant, ":stored_until")

    def credentials(self, tenant: str) -> str:
        return self._tagged("credentials", tenant)

    def credential_lock(self, tenant: str, server: str) -> str:
        return self._tagged("credentials", tenant, f":lock:{server}")  # server names are [A-Za-z0-9_.-]

    @property
    def credential_tenants(self) -> str:
        return f"{self.prefix}:credential-tenants"

    def oauth_state(self, state: str) -> str:
        """A connect flow's pending state, by its hash: the state itself is a secret and never a key name."""
        return self._tagged("oauth-state", hashlib.sha256(state.encode()).hexdigest())

    def oauth_machine(self, server: str) -> str:
        return self._tagged("oauth-machine", server)

    def oauth_client(self, server: str) -> str:
        return self._tagged("oauth-client", server)

    def leases(self, server: str) -> str:
        return self._tagged("leases", server)

    @property
    def workers(self) -> str:
        return f"{self.prefix}:workers"

    @property
    def cursor_secret(self) -> str:
        return f"{self.prefix}:cursor-secret"

    @property
    def queue(self) -> str:
        return f"{self.prefix}:queue"

    def listens(self, holder: str) -> str:
        """Control plane: the open listens of one holder (the SHA-256 of its API key), store/listens.py."""
        return f"{self.prefix}:listens:{holder}"

    @property
    def queue_turns(self) -> str:
        """Control plane: tenant -> the queue score its next job takes (store/queue.py's fair queueing)."""
        return f"{self.prefix}:queue:turns"

    @property
    def done_channel(self) -> str:
        return self._channel("done")

    @property
    def wake_channel(self) -> str:
        return self._channel("wake")

    @property
    def released_channel(self) -> str:
        return self._channel("released")

    @property
    def credentials_channel(self) -> str:
        return f"{self.prefix}:events:credentials"

    @property
    def cancel_channel(self) -> str:
        return self._channel("cancel")
