"""The batch request, the item result, the batch document, and the status enums with their terminal sets."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    model_serializer,
)

from mcp_batch.item_progress import ItemProgress
from mcp_batch.metadata import Metadata, RequestMetadata
from mcp_batch.questions import InputRequest, QuestionSettings


class Mode(StrEnum):
    """How a batch's calls are scheduled."""

    concurrent = "concurrent"
    serial = "serial"


class OnError(StrEnum):
    """What a failing item does to the rest of the batch."""

    continue_ = "continue"
    stop = "stop"


class Priority(StrEnum):
    """Where a batch's calls stand against its tenant's other batches on a shared backend (docs/api.md)."""

    low = "low"
    normal = "normal"
    high = "high"


class BatchStatus(StrEnum):
    """Where a batch is in its life."""

    queued = "queued"
    running = "running"
    cancelling = "cancelling"
    completed = "completed"
    cancelled = "cancelled"
    expired = "expired"


TERMINAL_BATCH = frozenset({BatchStatus.completed, BatchStatus.cancelled, BatchStatus.expired})


class ItemStatus(StrEnum):
    """Where one call is; every status but `pending`, `running` and `input_required` is final."""

    pending = "pending"
    running = "running"
    input_required = "input_required"  # running, its backend waiting for the caller's answer (questions.py)
    ok = "ok"
    error = "error"
    unknown_server = "unknown_server"
    unknown_tool = "unknown_tool"
    timeout = "timeout"
    skipped = "skipped"
    invalid_call = "invalid_call"
    blocked = "blocked"
    invalid_reference = "invalid_reference"
    invalid_cursor = "invalid_cursor"
    cancelled = "cancelled"
    expired = "expired"
    interrupted = "interrupted"
    unauthenticated = "unauthenticated"  # no usable credential of the tenant's for the backend, or refused: not sent


TERMINAL_ITEM = frozenset(set(ItemStatus) - {ItemStatus.pending, ItemStatus.running, ItemStatus.input_required})
# Terminal statuses that count as failures (and trigger on_error=stop); an item the caller ended is not one.
FAILED_ITEM = frozenset(TERMINAL_ITEM - {ItemStatus.ok, ItemStatus.skipped, ItemStatus.cancelled, ItemStatus.expired})
# What the items that never ran become once a batch halts, by why it halted (the batch row's `halt`).
HALTED = {"stop": ItemStatus.skipped, "cancel": ItemStatus.cancelled, "expire": ItemStatus.expired}
# An id's characters, as contract/validation.py checks them (stated here for the OpenAPI document): no '.' (references
# use dots), no control character (Unicode's Cc: C0, DEL and C1) and no line or paragraph separator.
ID_PATTERN = r"^[^.\x00-\x1f\x7f-\x9f\u2028\u2029]+$"
# A call's id as every door takes it (the Gumloop door's `ref` is one).
CallId = Annotated[str | None, Field(min_length=1, max_length=100, json_schema_extra={"pattern": ID_PATTERN})]
# The service's ceilings as the OpenAPI document states them: the settings' defaults (a deployment may raise them;
# contract/validation.py checks the configured ones). Kept here, not read from Settings: models.py imports no settings.
_DEFAULT_CEILINGS = {
    "max_calls_per_batch": 10_000,
    "max_concurrency_ceiling": 256,
    "response_max_bytes_ceiling": 10_000_000,
    "retention_ceiling_seconds": 7 * 86_400,
    "max_call_timeout_seconds": 3_600.0,
}
PRIORITY_DOC = (
    "`high`: the batch's calls go ahead of its tenant's `normal` and `low` ones on each shared backend, which keep "
    "a minimum share of its rate; `low` yields to both. Other tenants' shares are not touched."
)
# Largest `offset` of a page of results: beyond any batch, and within the integers Redis takes for a list index.
MAX_OFFSET = 2**31 - 1
# Longest `deadline_seconds`: a year (a larger float would overflow the deadline's timestamp).
MAX_DEADLINE_SECONDS = 365 * 86_400


class Call(BaseModel):
    """One MCP tool call in a batch."""

    model_config = ConfigDict(extra="forbid")

    id: CallId = Field(
        None, description="Caller's id for this call, unique in the batch (ignoring case); default: index."
    )
    # Names over 200 characters are an item's `invalid_call`, not a rejected batch; this bound only stops abuse.
    server: str = Field(min_length=1, max_length=10_000, description="Backend name from the servers file.")
    tool: str = Field(min_length=1, max_length=10_000, description="Tool name on that backend.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments.")
    timeout_seconds: StrictFloat | None = Field(
        None,
        gt=0,
        description="This call's timeout; default: its server's `timeout_seconds` from the servers file.",
        json_schema_extra={"maximum": _DEFAULT_CEILINGS["max_call_timeout_seconds"]},
    )
    cursor: str | None = Field(
        None,
        min_length=1,
        max_length=500,
        description="A `next_cursor` from an earlier read of a truncated item of the same server, tool and "
        "arguments: the call's result is that item's next page, read without calling the backend. A cursor that "
        "does not verify or does not match ends the item `invalid_cursor`.",
    )


class BatchRequest(BaseModel):
    """Body of `POST /v1/batches`."""

    model_config = ConfigDict(extra="forbid")

    calls: list[Call] = Field(
        description="The calls, in order; at least one, at most the configured maximum.",
        # checked with the batch's other faults (contract/validation.py); the maximum is the default setting's
        json_schema_extra={"minItems": 1, "maxItems": _DEFAULT_CEILINGS["max_calls_per_batch"]},
    )
    mode: Mode = Field(Mode.concurrent, description="`concurrent`: up to max_concurrency at once; `serial`: in order.")
    on_error: OnError = Field(
        OnError.continue_, description="`stop`: start nothing new after the first failing item; the rest are skipped."
    )
    max_concurrency: int | None = Field(
        None,
        ge=1,
        description="Calls of this batch in flight at once (concurrent mode); default from settings.",
        json_schema_extra={"maximum": _DEFAULT_CEILINGS["max_concurrency_ceiling"]},
    )
    read_only: StrictBool = Field(
        True, description="Run only tools annotated readOnlyHint (or listed read-only); others are `blocked`."
    )
    priority: Priority = Field(Priority.normal, description=PRIORITY_DOC)
    response_max_bytes: int | None = Field(
        None,
        ge=1024,
        description="Budget for the serialized `results` of the document; default from settings.",
        json_schema_extra={"maximum": _DEFAULT_CEILINGS["response_max_bytes_ceiling"]},
    )
    deadline_seconds: StrictFloat | None = Field(
        None,
        gt=0,
        le=MAX_DEADLINE_SECONDS,
        description="From submit: when it passes, unfinished items become `expired` and so does the batch (at most "
        "a year).",
    )
    retention_seconds: int | None = Field(
        None,
        ge=1,
        description="How long the finished batch is kept (then GET is 404); default from settings.",
        json_schema_extra={"maximum": _DEFAULT_CEILINGS["retention_ceiling_seconds"]},
    )
    questions: QuestionSettings | None = Field(
        None, description="What a backend's question during a call does: `decline` it at once, or `ask` the caller."
    )
    webhook_url: str | None = Field(
        None,
        description="POSTed once with a summary when the batch ends, signed in `X-MCP-Batch-Signature` "
        "(`sha256=` and the hex HMAC-SHA256 of the body). At most 2,000 characters, https:// (http:// only where the "
        "service's allow-list says so), under a prefix of the allow-list (MCP_BATCH_WEBHOOK_ALLOW). Never shown back.",
    )
    metadata: RequestMetadata = None


class WebhookStatus(StrEnum):
    """Where a batch's completion webhook is: `pending` (not yet delivered; retried), then delivered or failed."""

    pending = "pending"
    delivered = "delivered"
    failed = "failed"


class WebhookState(BaseModel):
    """The completion webhook's delivery (never its URL)."""

    status: WebhookStatus
    attempts: int = Field(description="Deliveries tried so far.")


class ItemError(BaseModel):
    """Why an item did not succeed. The message never repeats argument values."""

    code: str = Field(description="Machine-readable cause, e.g. tool_error, backend_unavailable, timeout.")
    message: str = Field(description="Human-readable explanation.")
    type: str = Field(description="Error family: tool, backend, timeout, validation, batch.")
    details: dict[str, Any] | None = Field(None, description="Extra structured facts (never argument values).")


class ItemResult(BaseModel):
    """One call's result as it stands: pending, running, or finished. Fields that do not apply are left out."""

    index: int = Field(description="Zero-based position in the submitted calls.")
    id: str = Field(description="The call's id.")
    server: str
    tool: str
    status: ItemStatus
    content: list[dict[str, Any]] | None = Field(None, description="MCP content blocks the tool returned.")
    structured_content: Any = Field(None, description="The tool's structured result, if any.")
    meta: dict[str, Any] | None = Field(
        None, description="The tool result's own `_meta` (runtime metadata of the tool), when it sent one."
    )
    is_error: bool | None = Field(None, description="The tool's own isError flag, when the tool answered.")
    error: ItemError | None = None
    input_request: InputRequest | None = Field(None, description="The backend's question, while `input_required`.")
    started_at: str | None = Field(None, description="When a worker took the item (ISO 8601, UTC).")
    finished_at: str | None = Field(None, description="When the item's result was made (ISO 8601, UTC).")
    queued_seconds: float | None = Field(None, description="From the batch's submit to a worker taking the item.")
    connect_seconds: float | None = Field(
        None,
        description="Time the item waited for its backend's session to open (a stdio server starting, an HTTP "
        "handshake and tools/list); left out when a session was open.",
    )
    rate_wait_seconds: float | None = Field(None, description="Time waiting for the backend's lease and rate slot.")
    elapsed_seconds: float | None = Field(
        None, description="The backend call itself, from send to answer (of the last attempt, when it was retried)."
    )
    worker: str | None = Field(None, description="The worker process that ran the call.")
    seq: int | None = Field(
        None,
        description="Place in finish order (1 = first to finish), the cursor of /results?after= and the id of its SSE "
        "event; null while the item has not finished. Items that never ran (skipped, cancelled, expired) get theirs "
        "when the batch ends, after every item that ran.",
    )
    truncated: bool = Field(
        False,
        description="This copy of the item was shrunk to fit the response budget: its content cut (see "
        "`next_cursor`), its `meta` or structured content left out when they did not fit whole.",
    )
    truncated_bytes: int = Field(0, description="Bytes removed from this copy (the stored item is whole).")
    next_cursor: str | None = Field(
        None,
        description="Where the rest of the content starts: pass it as `?cursor=` to GET /v1/batches/{id}/items/"
        "{item_id} (or get_item over MCP), or as a call's `cursor` with the same server, tool and arguments. Opaque; "
        "it expires with the batch.",
    )
    attempts: int | None = Field(None, description="Times the call was sent (transient failures may be retried).")
    recovered: bool = Field(
        False, description="The worker first running this call stopped mid-call; another worker took it over."
    )
    stored_truncated: bool = Field(
        False,
        description="The result was larger than the service stores for one item (`MCP_BATCH_MAX_RESULT_BYTES`): "
        "`structured_content` was dropped first and, if that was not enough, `content` cut (its first blocks kept, "
        "the last of them cut). Unlike `truncated`, nothing more can be fetched.",
    )
    stored_truncated_bytes: int = Field(0, description="Bytes of the result record that were not stored.")
    progress: ItemProgress | None = Field(None, description="While it runs: what its backend last reported.")

    # No return annotation: pydantic would take it for the serialized schema, and the schema stays the model's own
    # (every field that may be left out has a default, so none of them is required).
    @model_serializer(mode="wrap")
    def _without_nulls(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """Fields that do not apply (null) are left out of every serialized item."""
        return {key: value for key, value in handler(self).items() if value is not None}


class ItemPage(ItemResult):
    """One item, whole, or one page of its content when it is larger than a response (`next_cursor` for the rest)."""


class Counts(BaseModel):
    """How many items are in each state."""

    total: int
    succeeded: int
    failed: int
    pending: int
    running: int
    skipped: int
    input_required: int = Field(0, description="Running items waiting for the caller's answer (not in `running`).")
    cancelled: int = 0
    expired: int = 0
    unauthenticated: int = Field(
        0, description="Failed items whose backend needs a credential the tenant has not given (also in `failed`)."
    )


class BackendLimits(BaseModel):
    """The limits in force for a backend, across all workers together."""

    max_concurrency: int | None = Field(None, description="Calls in flight at once.")
    rate_limit: dict[str, float] | None = Field(None, description="per_second / per_minute / burst.")


class BatchDocument(BaseModel):
    """The aggregated response document of a batch."""

    id: str
    status: BatchStatus
    ok: bool = Field(description="True only when the batch is finished and every item is ok.")
    mode: Mode
    on_error: OnError
    max_concurrency: int
    read_only: bool = True
    priority: Priority = Priority.normal
    counts: Counts
    failed_ids: list[str] = Field(description="Ids of failed items, in index order.")
    failed_indexes: list[int] = Field(description="Indexes of failed items, in order.")
    stopped_at: int | None = Field(description="Index of the item that stopped the batch (on_error=stop).")
    results: list[ItemResult] = Field(description="Item results in index order (the page asked for).")
    results_offset: int = Field(0, description="Index of the first item in `results`.")
    next_offset: int | None = Field(None, description="Offset of the next page of `results`, if there is one.")
    response_max_bytes: int = Field(300_000, description="The budget `results` was fitted to.")
    truncated: bool = Field(False, description="Some items in `results` were shrunk to fit response_max_bytes.")
    truncated_bytes: int = Field(0, description="Bytes removed from `results` in all (fetch items whole by id).")
    limits: dict[str, BackendLimits] = Field(
        default_factory=dict, description="Per backend this batch calls: the limits in force when it was submitted."
    )
    deadline_at: str | None = Field(None, description="When unfinished items expire (deadline_seconds after submit).")
    retention_seconds: int = Field(86_400, description="How long the batch is kept once finished.")
    expires_at: str | None = Field(None, description="When the finished batch will be deleted (then GET is 404).")
    created_at: str
    started_at: str | None
    finished_at: str | None
    elapsed_seconds: float = Field(description="From submit to finish (or to now, while it runs).")
    retry_of: str | None = Field(
        None, description="The batch whose unsuccessful items this one reruns (POST /v1/batches/{id}/retry)."
    )
    settings_from: dict[str, str] | None = Field(
        None,
        description="A retry's: for each setting (each option of a submit, and `timeout_seconds`), the id of the batch "
        "it came from: the retry's own when its body set it, else the batch it was kept from. Null for a batch that is "
        "not a retry (its settings are its own).",
    )
    webhook: WebhookState | None = Field(
        None, description="The completion webhook's delivery, when the batch asked for one; else null."
    )
    metadata: Metadata = {}


class BatchSummary(BaseModel):
    """One batch in a listing: its state, not its results."""

    id: str
    status: BatchStatus
    total: int
    finished: int = Field(description="Items that have finished (whatever their status).")
    succeeded: int = Field(0, description="Items that ended `ok`.")
    failed: int = Field(0, description="Items that failed (error, timeout, blocked, ...).")
    not_run: int = Field(0, description="Items that never ran: skipped, cancelled or expired (once the batch ended).")
    created_at: str
    finished_at: str | None = None
    retry_of: str | None = None
    metadata: Metadata = {}
    priority: Priority = Priority.normal


class BatchList(BaseModel):
    """Answer of `GET /v1/batches`: the caller's batches, newest first."""

    batches: list[BatchSummary]
    next_cursor: str | None = Field(None, description="Pass as ?cursor= for the next (older) page.")


class ErrorDetail(BaseModel):
    """Body of a 404, 409, 413, 415, 429 or 503 answer of the REST routes: what went wrong, never a submitted value."""

    detail: str = Field(description="What went wrong.")
