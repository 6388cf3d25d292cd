"""The batch hash and the call specs as Python sees them: the one place (with the Lua scripts) that knows their
fields. Every other module gets a `BatchRow`, a `BatchMeta` or a `Spec`, never a raw hash."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from pydantic import TypeAdapter

from mcp_batch.models import (
    TERMINAL_BATCH,
    TERMINAL_ITEM,
    BackendLimits,
    BatchRequest,
    BatchStatus,
    Call,
    ItemStatus,
    Mode,
    OnError,
    Priority,
    WebhookState,
    WebhookStatus,
)
from mcp_batch.tenants import DEFAULT_TENANT

# The fields a worker needs to schedule a batch (one HMGET, not the whole hash).
META_FIELDS = ["mode", "max_concurrency", "status", "read_only", "created_at", "shards", "deadline_at", "tenant"]
META_FIELDS += ["rate_share", "traceparent", "on_error", "priority", "calls_by_server"]
LIMITS = TypeAdapter(dict[str, BackendLimits])  # the `limits` field: JSON, as the document shows it
LIST_FIELDS = ["status", "total", "finished", "created_at", "finished_at", "retry_of", "deadline_at", "claimed", "halt"]
LIST_FIELDS += ["metadata"]
LIST_FIELDS += ["priority"]
LIST_FIELDS += [f"n:{status.value}" for status in sorted(TERMINAL_ITEM)]  # finished items by status


@dataclass(frozen=True)
class BatchMeta:
    """What a worker needs to schedule a batch."""

    mode: Mode
    max_concurrency: int
    status: BatchStatus
    read_only: bool
    created_at: float
    shards: int
    deadline_at: float | None
    tenant: str = DEFAULT_TENANT
    rate_share: float | None = None
    traceparent: str | None = None  # W3C, of the submit's span: the worker's spans join the batch's trace
    on_error: OnError = OnError.continue_
    priority: Priority = Priority.normal
    servers: tuple[str, ...] = ()  # the backends its calls name


def parse_meta(raw: list[bytes | None]) -> BatchMeta | None:
    """From an HMGET of META_FIELDS; None when the batch is gone."""
    if raw[0] is None:
        return None
    text = [None if v is None else v.decode() for v in raw]
    mode, concurrency, status, read_only, created, shards, deadline, tenant, share, traceparent, on_error = text[:11]
    return BatchMeta(
        Mode(mode or Mode.concurrent),
        int(concurrency or 1),
        BatchStatus(status or BatchStatus.queued),
        read_only == "1",
        float(created or 0),
        int(shards or 1),
        None if deadline is None else float(deadline),
        tenant or DEFAULT_TENANT,
        None if share is None else float(share),
        traceparent,
        OnError(on_error or OnError.continue_),
        Priority(text[11] or Priority.normal),
        tuple(json.loads(text[12])) if text[12] else (),
    )


@dataclass(frozen=True)
class BatchRow:
    """The whole batch hash, typed."""

    status: BatchStatus
    mode: Mode
    on_error: OnError
    max_concurrency: int
    total: int
    claimed: int
    finished: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    deadline_at: float | None
    limits: str  # JSON: {server: BackendLimits}
    read_only: bool
    response_max_bytes: int
    retention: int
    tenant: str
    retry_of: str | None
    halt: str | None  # why nothing more is claimed: stop, cancel or expire
    stopped_at: int | None
    counts: dict[ItemStatus, int]  # finished items by status
    webhook: WebhookState | None
    orphaned: tuple[int, ...] = ()  # once ended: claimed items that never finished, in index order
    deadline_seconds: float | None = None  # the deadline as submitted (a retry counts it from its own submit)
    settings_from: dict[str, str] | None = None  # a retry's: each setting it kept, and the batch it came from
    # Items a take-over found in flight on a stopped worker (which may have sent them): index -> that worker ('' if
    # unknown); the hash's `lost:<index>`, copied from the job's `runner:<job>`. One here without a record may have run.
    lost: dict[int, str] = field(default_factory=dict)
    # Of the claimed items without a record: how many have a call running (the jobs' `busy:<job>`, None when no job
    # reported it), and those a job holds unsent (its `held:<job>`), as of each job's last round trip.
    busy: int | None = None
    held: frozenset[int] = frozenset()
    metadata: dict[str, str] = field(default_factory=dict)  # the `metadata` field: JSON, written when not empty

    @property
    def running(self) -> int:
        """Claimed items with a call running: at their backend, at its gate or passing their checks."""
        in_hand = self.claimed - self.finished
        return in_hand if self.busy is None else min(self.busy, in_hand)

    questions: str | None = None  # the `questions` setting as submitted (JSON), when it set one
    priority: Priority = Priority.normal

    @property
    def ended_items(self) -> int:
        """How many items have a place in finish order: the finished ones, and once the batch has ended every item
        that never will (which take theirs after them)."""
        if self.status not in TERMINAL_BATCH:
            return self.finished
        return self.finished + self.total - self.claimed + len(self.orphaned)

    def unrun_seq(self, index: int) -> int | None:
        """The seq of an item that has no record, once the batch has ended (None before, or if it cannot have one):
        those never claimed first, in index order, then those claimed but never finished (`orphaned`)."""
        if self.status not in TERMINAL_BATCH:
            return None
        if index >= self.claimed:
            return self.finished + index - self.claimed + 1
        if index in self.orphaned:
            return self.finished + self.total - self.claimed + self.orphaned.index(index) + 1
        return None

    def unrun_index(self, seq: int) -> int:
        """The index of the item with this seq among those that never finished (seq past `finished`)."""
        rank = seq - self.finished - 1
        never_claimed = self.total - self.claimed
        return self.claimed + rank if rank < never_claimed else self.orphaned[rank - never_claimed]

    def as_of(self, now: float) -> BatchRow:
        """The row as a reader sees it at `now`: once the deadline has passed, as the EXPIRE script leaves it, whether
        or not a worker's sweep has run it yet (a read writes nothing). Nothing more is claimed (`halt`), and with no
        call in flight the batch has ended, `expired` at its deadline; with calls in flight their workers cut them at
        the deadline, and the last one's record ends it."""
        if not past_deadline(self.status, self.deadline_at, self.halt, now):
            return self
        if self.claimed > self.finished:
            return replace(self, halt="expire")
        return replace(self, halt="expire", status=BatchStatus.expired, finished_at=self.deadline_at)


def past_deadline(status: BatchStatus, deadline_at: float | None, halt: str | None, now: float) -> bool:
    """Whether the batch's deadline has passed without the EXPIRE script having run on it yet (`BatchRow.as_of`):
    with no call in flight (no item claimed and not finished), it has then ended for a reader."""
    return deadline_at is not None and deadline_at <= now and status not in TERMINAL_BATCH and not halt


def _float(value: str | None) -> float | None:
    return None if value is None else float(value)


def parse_row(raw: Mapping[bytes, bytes]) -> BatchRow | None:
    """From an HGETALL of the batch hash; None when the batch is gone."""
    if not raw:
        return None
    m = {k.decode(): v.decode() for k, v in raw.items()}
    webhook = None
    if "webhook_url" in m:
        status = WebhookStatus(m.get("webhook_status", WebhookStatus.pending.value))
        webhook = WebhookState(status=status, attempts=int(m.get("webhook_attempts", 0)))
    return BatchRow(
        status=BatchStatus(m["status"]),
        mode=Mode(m["mode"]),
        on_error=OnError(m["on_error"]),
        max_concurrency=int(m["max_concurrency"]),
        total=int(m["total"]),
        claimed=int(m["claimed"]),
        finished=int(m["finished"]),
        created_at=float(m["created_at"]),
        started_at=_float(m.get("started_at")),
        finished_at=_float(m.get("finished_at")),
        deadline_at=_float(m.get("deadline_at")),
        limits=m.get("limits", "{}"),
        read_only=m.get("read_only", "1") == "1",
        response_max_bytes=int(m.get("response_max_bytes", 300_000)),
        retention=int(m.get("retention", 86_400)),
        tenant=m.get("tenant", DEFAULT_TENANT),
        retry_of=m.get("retry_of"),
        halt=m.get("halt"),
        stopped_at=int(m["stopped_at"]) if "stopped_at" in m else None,
        counts={s: int(m.get(f"n:{s.value}", 0)) for s in ItemStatus},
        webhook=webhook,
        orphaned=tuple(int(i) for i in m["orphaned"].split(",")) if m.get("orphaned") else (),
        deadline_seconds=_float(m.get("deadline_seconds")),
        settings_from=json.loads(m["settings_from"]) if "settings_from" in m else None,
        lost={int(k[5:]): v for k, v in m.items() if k.startswith("lost:")},
        busy=_busy(m),
        held=frozenset(int(i) for k, v in m.items() if k.startswith("held:") for i in v.split(",") if i),
        metadata=load_metadata(m.get("metadata")),
        questions=m.get("questions"),
        priority=Priority(m.get("priority", Priority.normal)),
    )


def _busy(m: Mapping[str, str]) -> int | None:
    found = [int(v) for k, v in m.items() if k.startswith("busy:")]
    return sum(found) if found else None


def load_metadata(raw: str | None) -> dict[str, str]:
    """The hash's `metadata` field (absent: none)."""
    return {} if raw is None else dict(json.loads(raw))


def new_row(
    request: BatchRequest,
    *,
    now: float,
    max_concurrency: int,
    shards: int,
    limits: str,
    response_max_bytes: int,
    retention: int,
    tenant: str,
    tenant_counts: tuple[str, str],
    rate_share: float | None,
    links: Mapping[str, str | None],
) -> dict[str, Any]:
    """The hash of a batch just submitted. `tenant_counts`: the keys of its tenant's unfinished items and of when its
    stored bytes are released; `links` (retry_of, settings_from, idempotency_key, webhook_url, traceparent) are
    written when set."""
    # What each finish-and-claim step reads and writes (ADVANCE) comes first: a small hash is stored as one list
    # (listpack) that Redis scans from its head for each field. The orphans list is empty, and no item has yet the
    # status nearly every item takes.
    fields: dict[str, Any] = {
        "status": BatchStatus.queued.value,
        "total": len(request.calls),
        "claimed": 0,
        "finished": 0,
        "on_error": request.on_error.value,
        "orphans": 0,
        f"n:{ItemStatus.ok.value}": 0,
        "mode": request.mode.value,
        "max_concurrency": max_concurrency,
        "shards": shards,
        "counted": 0,  # finished items already taken off the shared unfinished counts (on lease renewal)
        "created_at": repr(now),
        "limits": limits,
        "read_only": int(request.read_only),
        "response_max_bytes": response_max_bytes,
        "retention": retention,
        "tenant": tenant,
        # the scripts that renew and end the batch update the tenant's unfinished count and its stored bytes' release
        "tenant_unfinished": tenant_counts[0],
        "tenant_stored": tenant_counts[1],
        "priority": request.priority.value,
        # what the dry run's estimate counts as queued for each backend (store/backlog.py)
        "calls_by_server": json.dumps(Counter(call.server for call in request.calls), separators=(",", ":")),
    }
    if rate_share is not None:
        fields["rate_share"] = repr(rate_share)
    if request.metadata:
        fields["metadata"] = json.dumps(request.metadata)
    if request.deadline_seconds is not None:
        fields["deadline_seconds"] = repr(request.deadline_seconds)
        fields["deadline_at"] = repr(now + request.deadline_seconds)
    return fields | {name: value for name, value in links.items() if value is not None}


def stored_row(fields: Mapping[str, Any]) -> BatchRow:
    """The row a read of a batch just written with these fields would parse (each value as redis-py sends it), so
    a submit answers from what it wrote without reading it back."""
    stored = {name.encode(): _encoded(value) for name, value in fields.items()}
    row = parse_row(stored)
    assert row is not None  # a batch's fields are never empty
    return row


def _encoded(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, float):
        return repr(value).encode()
    return str(value).encode()


@dataclass(frozen=True)
class Spec:
    """One stored call: what it calls, with what."""

    id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    timeout_seconds: float | None = None
    cursor: str | None = None  # the call reads a page of an earlier item instead of calling its backend


def load_head(index: int, raw: bytes) -> dict[str, Any]:
    """What an item shows of its stored call: its index, id, server and tool (a read of many items wants no more)."""
    try:
        spec = orjson.loads(raw)
    except orjson.JSONDecodeError:  # arguments only Python's json reads (NaN): they are not needed here
        spec = json.loads(raw)
    return {"index": index, "id": spec["id"], "server": spec["server"], "tool": spec["tool"]}


def dump_specs(calls: Sequence[Call], start: int = 0) -> list[bytes]:
    """The stored form of calls `start`, `start + 1`...: compact UTF-8 JSON of `id` (the index when the call has
    none), `server`, `tool`, `arguments`, and `timeout_seconds` and `cursor` when set (what `load_spec` reads).

    Written a call at a time by orjson, in pieces: what precedes the arguments is written once per server and tool
    (a batch has few), and a dict per call is not built; `json` (ASCII) writes a call orjson cannot (an integer
    over 64 bits)."""
    dumps = orjson.dumps
    heads: dict[tuple[str, str], bytes] = {}
    specs = []
    for index, call in enumerate(calls, start):
        try:
            head = heads.get((call.server, call.tool))
            if head is None:
                head = b',"server":%b,"tool":%b,"arguments":' % (dumps(call.server), dumps(call.tool))
                heads[call.server, call.tool] = head
            spec = [b'{"id":"%d"' % index if call.id is None else b'{"id":' + dumps(call.id), head]
            spec.append(dumps(call.arguments))
            if call.timeout_seconds is not None:
                spec += (b',"timeout_seconds":', dumps(call.timeout_seconds))
            if call.cursor is not None:
                spec += (b',"cursor":', dumps(call.cursor))
        except orjson.JSONEncodeError:
            specs.append(_dump_spec(index, call))
            continue
        spec.append(b"}")
        specs.append(b"".join(spec))
    return specs


def _dump_spec(index: int, call: Call) -> bytes:
    """One call's stored form, by `json` (its ASCII escapes write what UTF-8 cannot)."""
    spec: dict[str, Any] = {"id": call.id or str(index), "server": call.server, "tool": call.tool}
    spec["arguments"] = call.arguments
    if call.timeout_seconds is not None:
        spec["timeout_seconds"] = call.timeout_seconds
    if call.cursor is not None:
        spec["cursor"] = call.cursor
    return json.dumps(spec).encode()


_LONG_NUMBER = re.compile(rb"\d{19}")  # may be an integer past 64 bits, which orjson would read as a float


def load_spec(raw: bytes) -> Spec:
    spec = json.loads(raw) if _LONG_NUMBER.search(raw) else orjson.loads(raw)
    return Spec(
        spec["id"], spec["server"], spec["tool"], spec["arguments"], spec.get("timeout_seconds"), spec.get("cursor")
    )
