"""The answer of the dry run (`POST /v1/batches:validate`): what would become of each call, and how long the batch
would take (its `estimate`; contract/estimate.py computes it, docs/api.md states the method)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from mcp_batch.models import ItemError, ItemStatus


class DryRunItem(BaseModel):
    """What would become of one call."""

    index: int
    id: str
    server: str
    tool: str
    status: ItemStatus = Field(description="`pending` (it would be dispatched) or the status it would end with.")
    error: ItemError | None = None


class BoundKind(StrEnum):
    """What holds a batch's pace: its longest single call, a backend's rate limit (or the tenant's share of it), a
    backend's concurrency cap, or the batch's own `max_concurrency` (one lane in serial mode)."""

    longest_call = "longest_call"
    rate_limit = "rate_limit"
    tenant_rate_share = "tenant_rate_share"
    backend_concurrency = "backend_concurrency"
    max_concurrency = "max_concurrency"


class Bound(BaseModel):
    """One limit and the time it alone would take to get the batch through."""

    kind: BoundKind
    server: str | None = Field(
        None, description="The backend whose limit (or call) this is; null for `max_concurrency`."
    )
    seconds: float = Field(description="Wall time this limit alone needs (queued work ahead included).")
    explanation: str = Field(description="How the figure was reached, in words.")


class ToolLatency(BaseModel):
    """The call latency observed recently for one tool of one backend (the worker's rolling sample)."""

    server: str
    tool: str
    calls: int = Field(description="Calls of this tool in the batch.")
    samples: int = Field(description="Recent calls the mean is taken over; 0: none observed yet.")
    mean_seconds: float | None = Field(None, description="Their mean `elapsed_seconds`; null when none is known.")


class BackendLoad(BaseModel):
    """What the batch asks of one backend, and what is already queued for it."""

    server: str
    calls: int = Field(description="The batch's calls of this backend.")
    queued_ahead: int = Field(
        description="Unfinished items of the tenant's other unfinished batches that call this backend (another "
        "tenant's work is never counted)."
    )
    rate_per_second: float | None = Field(None, description="The rate the batch's calls may go at (its share).")
    burst: int | None = None
    max_concurrency: int | None = Field(None, description="The backend's concurrency cap, all workers together.")


class Estimate(BaseModel):
    """The expected wall time of the batch, from its backends' limits, its own `max_concurrency` and the latency
    observed recently per tool; `bound` names what dominates."""

    seconds: float | None = Field(
        description="Expected wall time from the first call to the last result; null when no limit bounds it and no "
        "latency is known."
    )
    complete: bool = Field(
        description="Whether every tool's latency was known; when false, `seconds` counts only what is (a lower "
        "bound) and `unknown_latency` names the tools without a sample."
    )
    bound: Bound | None = Field(None, description="The limit that dominates (the largest of `bounds`).")
    bounds: list[Bound] = Field(default_factory=list, description="Each limit that applies, largest first.")
    backends: list[BackendLoad] = Field(default_factory=list)
    latency: list[ToolLatency] = Field(default_factory=list)
    unknown_latency: list[str] = Field(
        default_factory=list, description="`server/tool` of each tool no latency is known for yet."
    )


class ConnectNeeded(BaseModel):
    """A server the batch calls that takes the tenant's own credential, which it has not given (or which no longer
    works): its calls would end `unauthenticated`."""

    server: str
    connect: str = Field(description="The route that gives it: `PUT /v1/credentials/{server}` or `POST .../connect`.")
    reason: str = Field(description="`missing` (none set) or `needs_connect` (the OAuth grant no longer works).")


class DryRun(BaseModel):
    """Answer of `POST /v1/batches:validate`: nothing was stored or queued."""

    valid: bool = Field(description="True when every call would be dispatched.")
    results: list[DryRunItem]
    connect: list[ConnectNeeded] = Field(
        default_factory=list, description="Servers the tenant must give a credential for before the batch can run."
    )
    estimate: Estimate | None = Field(None, description="How long the batch would take (docs/api.md, the method).")
