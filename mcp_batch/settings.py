"""One settings object for API, worker and CLI, read from `MCP_BATCH_*` environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from mcp_batch.host_policy import host_entry, origin_entry
from mcp_batch.mcp_door_settings import McpDoorSettings
from mcp_batch.redis_urls import database_of
from mcp_batch.webhook_urls import allow_entry

if TYPE_CHECKING:
    from mcp_batch.keys import Keys


class Settings(McpDoorSettings):
    """Everything configurable; built once at start-up and passed down."""

    model_config = SettingsConfigDict(env_prefix="MCP_BATCH_", env_nested_delimiter="__", extra="ignore")

    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="URL of the Redis that the API, every worker and `mcp-batch status` share: `redis://`, "
        "`rediss://`, or a Sentinel-managed primary as "
        "`redis+sentinel://[user:password@]host:port[,host:port...]/<service>[/<db>]` (the sentinels; the password "
        "is the primary's).",
    )
    servers: Path = Field(
        Path("servers.json"),
        description="Path of the servers file: the backends, in the `mcpServers` JSON shape; a bad one stops start-up.",
    )
    key_prefix: str = Field("mcpb", description="Prefix of every Redis key, so several deployments can share a Redis.")
    data_redis_url: str | None = Field(
        None,
        description="URL of the Redis that holds each batch's, tenant's and backend's data (the data plane); unset: "
        "the MCP_BATCH_REDIS_URL one. `redis+cluster://host:port[,host:port...]` names a Redis Cluster (or Valkey "
        "cluster); MCP_BATCH_REDIS_URL keeps arq's queue, the channels and the heartbeats and cannot be a cluster.",
    )
    auth: Literal["keys", "none", "oauth", "keys,oauth"] = Field(
        "keys",
        description="Who may call the /v1 routes, POST /mcp/tools/call, /mcp and /metrics: `keys`: `Authorization: "
        "Bearer <key>` from the keys file; `oauth`: a bearer access token from one of MCP_BATCH_OAUTH_ISSUERS; "
        "`keys,oauth`: either; `none`: no auth, every caller is the one tenant `default` with every right.",
    )
    keys: Path | None = Field(
        None,
        description="Path of the keys file (JSON): SHA-256 hashes of API keys with their tenants and rights "
        "(`mcp-batch keys new` makes entries), and the tenants section; needed with `keys`, optional with `oauth`.",
    )

    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the API serves under besides loopback ones (`localhost`, `127.0.0.1`, `[::1]`, any "
        "port) and the address a request arrived at: a DNS name it is reached by, e.g. `batches.example.com` (any "
        "port), `batches.example.com:8443` or `*.example.com`; `*` turns the check off (a proxy in front checks Host). "
        "A request naming another host is refused with 421 (DNS rebinding).",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Origins (`https://app.example.com`: scheme, host and port) whose browser pages may call the API "
        "besides its own; `*`: any. A request with another `Origin` header is refused with 403.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _host_entries(cls, entries: list[str]) -> list[str]:
        return [host_entry(entry) for entry in entries]

    @field_validator("allowed_origins")
    @classmethod
    def _origin_entries(cls, entries: list[str]) -> list[str]:
        return [origin_entry(entry) for entry in entries]

    max_calls_per_batch: int = Field(
        10_000, ge=1, description="Most calls one batch may hold (a key may set fewer); more is a 422."
    )
    default_max_concurrency: int = Field(
        16,
        ge=1,
        description="A batch's `max_concurrency` when it gives none: its calls in flight at once, on all workers.",
    )
    max_concurrency_ceiling: int = Field(
        256, ge=1, description="Largest `max_concurrency` a batch may ask for; more is a 422."
    )
    retention_seconds: int = Field(
        86_400,
        ge=1,
        description="How long a batch is kept after it ends (then every route answers 404 for it), unless it sets "
        "its own `retention_seconds`.",
    )
    retention_ceiling_seconds: int = Field(
        7 * 86_400, ge=1, description="Longest `retention_seconds` a batch may ask for; more is a 422."
    )
    max_unfinished_items: int = Field(
        1_000_000,
        ge=1,
        description="Backpressure: when the unfinished items of all batches, with the new batch's, would pass this, "
        "a submit is refused with 429 and nothing is stored.",
    )
    backpressure_retry_after_seconds: int = Field(
        5, ge=1, description="`Retry-After` (seconds) of the 429 a submit gets under backpressure."
    )
    max_wait_seconds: float = Field(
        60.0,
        ge=0,
        description="Longest a `GET ?wait=`, a `POST /v1/batches?wait=` or the MCP get_batch tool holds the request "
        "(the REST `wait` itself is at most 60).",
    )
    max_stored_bytes: int = Field(
        1024**3,
        ge=1,
        description="Bytes of calls one tenant's batches may hold in Redis until they expire before POST answers 429 "
        "(a key's own `max_stored_bytes` takes its place for its tenant).",
    )

    max_argument_bytes: int = Field(
        20_000,
        ge=2,
        description="Largest serialized `arguments` of one call; a larger call ends `invalid_call` without being sent.",
    )
    max_argument_depth: int = Field(
        8,
        ge=1,
        description="Deepest nesting of one call's `arguments`; a deeper call ends `invalid_call` without being sent.",
    )
    response_max_bytes: int = Field(
        300_000,
        ge=1024,
        description="Default byte budget of a document's `results` (a batch may set `response_max_bytes`); also the "
        "page size of GET .../items/{item_id}.",
    )
    response_max_bytes_ceiling: int = Field(
        10_000_000, ge=1024, description="Largest `response_max_bytes` a batch may ask for; more is a 422."
    )
    sync_wait_seconds: float = Field(
        30.0, gt=0, description="How long the synchronous doors (POST /mcp/tools/call, call_tools_batch) wait."
    )
    gumloop_max_calls: int = Field(
        5, ge=1, description="Most calls in one POST /mcp/tools/call (Gumloop's cap); more is a 400."
    )

    default_timeout_seconds: float = Field(
        30.0, gt=0, description="Per-call timeout of the servers that set no `timeout_seconds` in the servers file."
    )
    max_call_timeout_seconds: float = Field(
        3_600.0, gt=0, description="Largest `timeout_seconds` one call of a batch may ask for; more is a 422."
    )
    connect_timeout_seconds: float = Field(
        20.0, gt=0, description="Longest time to open a backend session (start or connect, initialize, list its tools)."
    )
    tools_refresh_seconds: float = Field(
        300.0, gt=0, description="How long a backend's tools/list, cached in Redis, is used before it is listed again."
    )

    limit_max_wait_seconds: float = Field(
        600.0,
        gt=0,
        description="Longest a call may wait for its backend's concurrency lease and rate slot; a call that would "
        "wait longer ends `error` (`rate_limited`) at once.",
    )
    limiter: Literal["redis", "local"] = Field(
        "redis", description="`redis`: backend limits hold across all workers; `local`: per process (comparison only)."
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="Most sends of a read-only or idempotent call whose failure is transient (the connection broke, "
        "HTTP 5xx or 429); any other call is sent once.",
    )

    max_shards: int = Field(16, ge=1, description="Most shards (arq jobs) one batch is split into across workers.")
    shard_min_items: int = Field(
        50,
        ge=1,
        description="Fewest items per shard (a batch gets at most one shard per this many), so small batches stay in "
        "one job.",
    )

    worker_max_jobs: int = Field(
        50,
        ge=1,
        description="Shard jobs one worker process runs at once (arq's max_jobs); never two shards of one batch.",
    )
    worker_tenant_max_jobs: int | None = Field(
        None,
        ge=1,
        description="Most of one worker's job slots one tenant's jobs hold at once, so another tenant's batch finds a "
        "slot however long the first tenant's jobs run (a call waiting on a person's answer included). Default: four "
        "fifths of MCP_BATCH_WORKER_MAX_JOBS, rounded up, and never more than all but one (1, 1, 2, 4, 40 of 1, 2, 3, "
        "5, 50 slots; a worker of one slot lends it whole, so there another tenant waits for its job to end); all of "
        "them with MCP_BATCH_AUTH=none (one tenant).",
    )
    worker_idle_poll_seconds: float = Field(
        0.5, gt=0, description="Fallback queue poll when no wake-up arrives (new work wakes workers at once)."
    )
    job_timeout_seconds: int = Field(
        86_400, ge=1, description="Longest time one shard job may run on a worker (arq's job timeout)."
    )
    lease_seconds: float = Field(
        30.0,
        ge=1,
        description="A shard job's lease, renewed every third of it: a worker that stops renewing it (killed, frozen) "
        "has its part taken over by another after this.",
    )
    sweep_seconds: float = Field(
        1.0, gt=0, description="How often each worker looks for lapsed leases, passed deadlines and due webhooks."
    )
    repair_seconds: float = Field(
        300.0, gt=0, description="How often each worker reconciles the tenants' unfinished counts with their batches."
    )
    shutdown_grace_seconds: float = Field(
        10.0, ge=0, description="On SIGTERM, how long in-flight calls may finish before they are cut and handed back."
    )
    cancel_grace_seconds: float = Field(
        5.0, ge=0, description="After a cancel, how long in-flight calls may finish before they are cut (`cancelled`)."
    )

    retry_base_seconds: float = Field(
        0.2,
        ge=0,
        description="Backoff of a call's retries: after the n-th failed send, a wait uniform between 0 and this "
        "* 2^(n-1), at most retry_max_seconds (full jitter).",
    )
    retry_max_seconds: float = Field(5.0, ge=0, description="Longest backoff between two attempts of one call.")
    redis_outage_seconds: float = Field(
        300.0,
        gt=0,
        description="How long a worker waits out a Redis outage, holding finished results; then its shard job fails "
        "and another worker takes its part over, as after a crash.",
    )
    replica_wait_seconds: float = Field(
        2.0,
        ge=0,
        description="Before a call that may write, the longest a worker waits for the item's claim to reach the "
        "replicas (WAIT), so a failover cannot lose the claim and send the write again; a wait that falls short "
        "ends the item `error` (`replica_wait_failed`), unsent. 0: writes never wait for replicas.",
    )
    replica_wait_count: int | None = Field(
        None,
        ge=0,
        description="How many replicas must have a write's claim before the call is sent; unset: every replica the "
        "primary reports connected (none connected: no wait); 0: none.",
    )

    # Progress events (GET /v1/batches/{id}/events) and completion webhooks.
    events_check_seconds: float = Field(
        0.25, gt=0, le=0.5, description="How often an open event stream checks its batch for newly finished items."
    )
    events_max_seconds: float = Field(
        3_600.0, gt=0, description="Longest life of one event stream; then `event: timeout` (reconnect to resume)."
    )
    events_heartbeat_seconds: float = Field(
        15.0, gt=0, description="A `: keep-alive` comment after this long without an event, so proxies keep streams."
    )
    webhook_allow: list[str] = Field(
        default_factory=list,
        description="URL prefixes a batch's webhook_url must match (scheme, host and port exactly, then the path); "
        "empty: webhooks are refused.",
    )
    webhook_secret: SecretStr | None = Field(
        None,
        description="Key of the webhooks' HMAC-SHA256 signature (`X-MCP-Batch-Signature`); unset: webhooks are "
        "refused.",
    )
    webhook_allow_private: bool = Field(
        False,
        description="Deliver webhooks to hosts resolving to loopback, private or link-local addresses (a receiver on "
        "the same machine or network).",
    )
    webhook_max_attempts: int = Field(8, ge=1, description="Most deliveries of one webhook before it is given up.")
    webhook_backoff_base_seconds: float = Field(
        1.0,
        ge=0,
        description="Backoff after a webhook's first failed delivery; it doubles each attempt, up to 5 min, with "
        "jitter.",
    )
    progress_writes_per_second: float = Field(
        2.0,
        gt=0,
        le=50,
        description="Most writes of one running item's progress (its backend's notifications/progress) per second; "
        "the latest report is kept, those in between are dropped.",
    )

    @property
    def key_names(self) -> Keys:
        """This deployment's key names; its channels carry the control plane's database (pub/sub ignores it)."""
        from mcp_batch.keys import Keys  # here: keys.py imports arq, which a command's start-up need not pay for

        return Keys(self.key_prefix, database_of(self.redis_url))

    @field_validator("webhook_allow")
    @classmethod
    def _allow_entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            allow_entry(entry)  # ValueError: start-up stops naming the fault
        return entries

    # Hostile input and storage limits.
    max_body_bytes: int = Field(
        10 * 1024 * 1024, ge=1, description="Largest request body on any route; a larger one is refused with 413."
    )
    max_json_depth: int = Field(
        64,
        ge=2,
        description="Deepest nesting of a JSON request body (arrays and objects); deeper is a 422 (at the Gumloop "
        "door, 400).",
    )
    max_result_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="Largest stored item record (serialized); a larger result is cut to fit and marked "
        "`stored_truncated`.",
    )
    # Operating it: metrics, logs, readiness.
    worker_metrics_port: int = Field(
        9464,
        ge=0,
        le=65_535,
        description="Port of a worker's Prometheus metrics (0: none); when taken, the next free one up to +16.",
    )
    metrics_public: bool = Field(
        False,
        description="Serve the API's /metrics to anyone even when auth is on; otherwise a scrape needs a key or token "
        "with the `admin` right.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Logs of `mcp-batch api`, `worker` and `dev`: `text`, one readable line per record; `json`, one "
        "JSON object per line, with batch, job and item ids.",
    )
    ready_worker_seconds: float = Field(
        30.0,
        gt=0,
        description="A worker is alive when its heartbeat is at most this old: for /readyz, `mcp-batch status` and "
        "the mcp_batch_workers_live gauge.",
    )
    worker_metrics_host: str = Field(
        "127.0.0.1",
        description="Address a worker's Prometheus metrics listen on: loopback unless set (a container scraped from "
        "its network sets 0.0.0.0).",
    )
    # Sessions opened ahead of the first batch.
    warm_sessions: bool = Field(
        True,
        description="When a worker starts, open a session to every configured backend in the background (never "
        "delaying start-up), so the first batch does not wait for a stdio server to start; a backend that cannot be "
        "reached is logged and opened again by its first call.",
    )

    # A backend's questions during a call (elicitation, sampling): the item's input request.
    input_wait_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description="How long a call whose backend asks a question is held open for the caller's answer, for a batch "
        "with `questions.policy: ask` that sets no `wait_seconds`; then the backend is answered `cancel`.",
    )
    input_request_max_bytes: int = Field(
        65_536,
        ge=1_024,
        description="Largest question stored as an item's input request (its params as JSON); a larger one is "
        "declined at once.",
    )


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    return Settings()
