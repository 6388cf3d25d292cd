"""What the MCP door's tools answer, in the fewest bytes a model needs: the views and their output schemas.

A tool's answer goes into a model's context, and its `tools/list` entry does on every turn, so both say what a model
acts on and no more. A batch's compact view holds its id, status, `ok`, the counts that are not zero, the failed ids,
and each call's id, status, content and error; `verbose` adds the rest of the REST document (the options, times,
limits, and each item's index, server, tool, timings, worker and seq). No view carries a null: a field that does not
apply is left out. The models below exist for their JSON schemas only (`schemas.lean` strips them further); the
views are built from the core's models, and the SDK's client validates each answer against its tool's schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mcp_batch.backend_info import ServerInfo
from mcp_batch.models import BatchDocument, BatchList, BatchStatus, ItemResult

# An item's fields in the compact view: what the call answered, or why it did not, and how to read the rest.
_ITEM_FIELDS = (
    "id",
    "status",
    "content",
    "structured_content",
    "meta",
    "error",
    "input_request",
    "progress",
    "truncated",
    "next_cursor",
    "stored_truncated",
)


# A field left out of an answer when it does not apply (never null), so its schema admits no null.
LEFT_OUT: Any = None


class ErrorView(BaseModel):
    code: str
    message: str
    details: dict[str, Any] = LEFT_OUT  # what fixes it (`connect`), whether it may have run


class ItemView(BaseModel):
    id: str
    status: str
    content: list[dict[str, Any]] = LEFT_OUT
    structured_content: Any = LEFT_OUT
    error: ErrorView = LEFT_OUT
    truncated: bool = LEFT_OUT
    next_cursor: str = LEFT_OUT


class BatchView(BaseModel):
    id: str
    status: BatchStatus
    ok: bool
    counts: dict[str, int]
    failed_ids: list[str] = LEFT_OUT
    results: list[ItemView]
    next_offset: int = LEFT_OUT


class SummaryView(BaseModel):
    id: str
    status: BatchStatus
    total: int
    finished: int


class ListingView(BaseModel):
    batches: list[SummaryView]
    next_cursor: str = LEFT_OUT


class ServerView(BaseModel):
    name: str
    tools: list[dict[str, Any]] = LEFT_OUT
    tools_error: str = LEFT_OUT
    connect: str = LEFT_OUT


class ServersView(BaseModel):
    result: list[ServerView]


def _without_nulls(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that are not null (one level: a backend's own values keep theirs)."""
    return {key: value for key, value in fields.items() if value is not None}


def item_view(item: ItemResult, verbose: bool = True) -> dict[str, Any]:
    """An item without nulls or fields at their default; only `_ITEM_FIELDS` unless `verbose`."""
    whole: dict[str, Any] = item.model_dump(mode="json", exclude_defaults=True)
    if verbose:
        if isinstance(whole.get("error"), dict):
            whole["error"] = _without_nulls(whole["error"])  # `details` when there are none
        return whole
    view = {name: whole[name] for name in _ITEM_FIELDS if name in whole}
    if item.error is not None:
        view["error"] = {"code": item.error.code, "message": item.error.message}
        if item.error.details:
            view["error"]["details"] = item.error.details
    return view


def batch_view(document: BatchDocument, verbose: bool = False) -> dict[str, Any]:
    """A batch document without nulls: compact, or `verbose` (the REST document's fields that apply)."""
    results = [item_view(item, verbose) for item in document.results]
    if verbose:
        whole = _without_nulls(document.model_dump(mode="json", exclude={"results"}))
        whole["limits"] = {server: _without_nulls(limits) for server, limits in whole.get("limits", {}).items()}
        return whole | {"results": results}
    counts = document.counts.model_dump()
    view: dict[str, Any] = {
        "id": document.id,
        "status": document.status.value,
        "ok": document.ok,
        "counts": {name: count for name, count in counts.items() if count or name == "total"},
    }
    if document.failed_ids:
        view["failed_ids"] = document.failed_ids
    if document.stopped_at is not None:
        view["stopped_at"] = document.stopped_at
    view["elapsed_seconds"] = round(document.elapsed_seconds, 3)
    if document.results_offset:
        view["results_offset"] = document.results_offset
    view["results"] = results
    if document.next_offset is not None:
        view["next_offset"] = document.next_offset
    return view


def listing_view(listing: BatchList) -> dict[str, Any]:
    """A page of the caller's batches, without nulls."""
    batches = [_without_nulls(summary.model_dump(mode="json")) for summary in listing.batches]
    return _without_nulls({"batches": batches, "next_cursor": listing.next_cursor})


def servers_view(servers: list[ServerInfo]) -> dict[str, Any]:
    """The backends, without nulls (`{"result": [...]}`, the SDK's shape for a list)."""
    listed = []
    for server in servers:
        fields = _without_nulls(server.model_dump(mode="json", exclude={"tools"}))
        if server.tools is not None:
            fields["tools"] = [_without_nulls(tool.model_dump(mode="json")) for tool in server.tools]
        listed.append(fields)
    return {"result": listed}
