"""The batch routes: submit (once per Idempotency-Key), list, retry, cancel, read (optionally waiting for the end, one
byte-bounded page), items, results. Every route on one batch answers 404 for another tenant's, as for a missing one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import AfterValidator
from starlette.convertors import StringConvertor, register_url_convertor

from mcp_batch.contract import list_filters
from mcp_batch.dry_runs import DryRun
from mcp_batch.metadata import QUERY_PREFIX
from mcp_batch.models import (
    MAX_OFFSET,
    BatchDocument,
    BatchList,
    BatchRequest,
    BatchStatus,
    ErrorDetail,
    ItemPage,
    ItemStatus,
)
from mcp_batch.retry_request import RetryRequest
from mcp_batch.store import idempotency
from service.application import deleting, reading, submitting
from service.application.services import Services
from service.auth import AUTH_RESPONSES, CallerDep
from service.bodies import JSONLinesRoute, accepts_json_lines, drain, json_off_loop, takes_query_prefix
from service.deps import OwnedBatchId, ServicesDep


class _ItemPath(StringConvertor):
    """An item id that may hold '/', but not one ending in `/input` (the route that answers an item's question)."""

    regex = r"(?:(?!/input$).)+"


register_url_convertor("item_path", _ItemPath())
router = APIRouter(prefix="/v1", tags=["batches"], route_class=JSONLinesRoute, responses=AUTH_RESPONSES)

_NDJSON = "application/x-ndjson"

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="1-200 printable ASCII characters. The same key again with the same request answers 200 with the "
        "batch the first one made (none is made); with a different request, 409. A key lives as long as its batch.",
        json_schema_extra={"pattern": idempotency.KEY_PATTERN},
    ),
    AfterValidator(idempotency.check_key),
]
Wait = Annotated[float, Query(ge=0, le=60, description="Hold the request up to this many seconds for the end.")]
Limit = Annotated[
    int | None, Query(ge=0, le=10_000, description="Most items of `results` (default: what the budget holds).")
]
_REPLAYED: dict[int | str, dict[str, Any]] = {
    200: {"model": BatchDocument, "description": "The batch an earlier request with this Idempotency-Key made."},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorDetail, "description": "No such batch (or it expired), or no such item."}
}
_LOCATION = {"Location": {"description": "The batch: `/v1/batches/{id}`.", "schema": {"type": "string"}}}
_STATUS = "(" + "|".join(ItemStatus) + ")"
_STATUSES = f"^{_STATUS}(,{_STATUS})*$"  # ?status=: what stream_results takes
_KEY_CONFLICT = "the Idempotency-Key was used with a different request, or that request is still in progress"


@router.post(
    "/batches",
    status_code=202,
    summary="Submit a batch of MCP tool calls",
    responses={
        202: {"description": "Accepted: the batch's summary and counts.", "headers": _LOCATION},
        **_REPLAYED,
        409: {"description": f"Refused: {_KEY_CONFLICT}."},
        429: {"description": "Too many unfinished items in the service; retry after `Retry-After` seconds."},
    },
)
@accepts_json_lines
async def submit_batch(
    request: BatchRequest,
    services: ServicesDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = 0,
    limit: Limit = None,
) -> BatchDocument:
    """Validate the whole batch, store it and queue it; answers at once with its summary and counts (`results` is
    empty: read them from `Location`, `GET /v1/batches/{id}?wait=S`). With `wait`, the answer is held up to that
    long for the batch's end and is then its document with a page of `results`, as `GET ?wait` would give: a small
    batch's calls and results in one request. The body is JSON, or JSON Lines (one call per line, the options in the
    query; problems name their line)."""
    submitted = await submitting.submit(services, request, caller, idempotency_key)
    return await _submitted(services, response, submitted, wait, limit)


@router.post(
    "/batches/{batch_id}/retry",
    status_code=202,
    summary="A new batch of a finished batch's items that did not succeed",
    responses={
        **_REPLAYED,
        **_NOT_FOUND,
        409: {"description": f"Refused: the batch has not finished, every item succeeded, or {_KEY_CONFLICT}."},
    },
)
async def retry_batch(
    batch_id: OwnedBatchId,
    services: ServicesDep,
    caller: CallerDep,
    response: Response,
    body: RetryRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> BatchDocument:
    """The items whose status is not `ok`, in order, each call whole (arguments, cursor, timeout), with the batch's
    settings but those the optional body sets; `retry_of` links back and `settings_from` says where each came from."""
    submitted = await submitting.retry(services, batch_id, caller, idempotency_key, body)
    return await _submitted(services, response, submitted)


async def _submitted(
    services: Services, response: Response, submitted: submitting.Submitted, wait: float = 0, limit: int | None = None
) -> BatchDocument:
    """The batch's summary and counts (no page of results: they are all pending) and where to read it; with `wait`,
    its document once it ends or `wait` passes."""
    response.headers["Location"] = f"/v1/batches/{submitted.batch_id}"
    if not submitted.created:
        response.status_code = 200
    if wait > 0:
        return await reading.read(services, submitted.batch_id, wait, 0, limit)
    if submitted.row is not None:  # rendered from what the submit stored: no read back
        return reading.submitted_document(submitted.batch_id, submitted.row)
    return await reading.document(services, submitted.batch_id, limit=0)


@router.post(
    "/batches:validate",
    summary="Dry run: every check, each call's would-be status, an estimate; nothing queued",
    response_model=DryRun,
)
@accepts_json_lines
async def validate_batch(request: BatchRequest, services: ServicesDep, caller: CallerDep) -> Response:
    """422 for whole-batch faults and 403 for what the key may not do, as for a submit; otherwise what would become
    of each call, and the `estimate` of the batch's wall time: the limit that bounds it (a backend's rate limit or
    concurrency cap, the tenant's share, the batch's max_concurrency), counting the work queued for its backends and
    each tool's recent latency (docs/api.md, the estimate)."""
    dry = await submitting.dry_run(services, request, caller)
    # A large batch's answer is written, and its items freed, off the event loop, as its body was read.
    answer = await json_off_loop(dry, "results")
    drain(dry)
    return Response(answer, media_type="application/json")


_TIME = f"Only batches created {{}} this time (exclusive): {list_filters.TIME_FORMAT}."
# What the document says such a parameter takes: either form list_filters reads
_DATE_TIME: dict[str, Any] = {
    "json_schema_extra": {
        "anyOf": [
            {"type": "string", "format": "date-time", "maxLength": 64},
            {"type": "string", "pattern": f"^{list_filters.EPOCH_PATTERN}$"},
            {"type": "null"},
        ]
    }
}


@router.get(
    "/batches",
    summary="The caller's batches, newest first",
    responses={422: {"description": "A parameter is malformed (each problem names it, never its value)."}},
)
@takes_query_prefix(QUERY_PREFIX)
async def list_batches(
    request: Request,
    services: ServicesDep,
    caller: CallerDep,
    status: Annotated[
        list[BatchStatus] | None, Query(description="Only batches in these statuses (repeat the parameter).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most batches in one page.")] = 50,
    cursor: Annotated[str | None, Query(pattern=r"^\d{1,20}$", description="`next_cursor` of the last page.")] = None,
    created_after: Annotated[str | None, Query(max_length=64, description=_TIME.format("after"), **_DATE_TIME)] = None,
    created_before: Annotated[
        str | None, Query(max_length=64, description=_TIME.format("before"), **_DATE_TIME)
    ] = None,
) -> BatchList:
    """A page of the batches the caller's tenant submitted (finished ones until they expire), newest first.

    `metadata.<key>=<value>` (repeat it for more pairs: a batch must have all of them) keeps only the batches with
    that metadata, read from an index of each pair, not from the tenant's every batch; the filters combine with each
    other, with `status` and with the cursor."""
    where = list_filters.filters(request.query_params.multi_items(), created_after, created_before)
    return await reading.batches(services, caller, set(status) if status else None, limit, cursor, where)


@router.get(
    "/batches/{batch_id}",
    summary="The batch document (optionally waiting for the batch to finish)",
    responses=_NOT_FOUND,
)
async def get_batch(
    batch_id: OwnedBatchId,
    services: ServicesDep,
    wait: Wait = 0,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="First item of `results` to return.")] = 0,
    limit: Limit = None,
) -> BatchDocument:
    """The document with one page of `results`, fitted to the batch's `response_max_bytes`."""
    return await reading.read(services, batch_id, wait, offset, limit)


@router.post(
    "/batches/{batch_id}/cancel",
    summary="Cancel a batch: nothing new starts; calls in flight finish or are cut after the grace period",
    responses={**_NOT_FOUND, 409: {"description": "The batch has already ended (its status is given)."}},
)
async def cancel_batch(batch_id: OwnedBatchId, caller: CallerDep, services: ServicesDep) -> BatchDocument:
    """The batch goes `cancelling`, then `cancelled` once no call is in flight; its pending items are `cancelled`.
    Answers with the document (no results page: `limit=0`)."""
    return await reading.cancel(services, caller, batch_id)


@router.delete(
    "/batches/{batch_id}",
    status_code=204,
    summary="Delete an ended batch, whole",
    responses={
        204: {"description": "Deleted: the batch, its results and its Idempotency-Key; then GET is 404."},
        **_NOT_FOUND,
        409: {"description": "The batch has not ended (its `status` is given): cancel it first (`cancel` names how)."},
    },
)
async def delete_batch(batch_id: OwnedBatchId, caller: CallerDep, services: ServicesDep) -> Response:
    """Remove an ended batch (completed, cancelled or expired) and all it holds: its calls and results, its place in
    the list and the metadata filters, its Idempotency-Key (free to use again) and its share of the tenant's stored
    bytes. A completion webhook not yet delivered is dropped."""
    await deleting.delete(services, caller, batch_id)
    return Response(status_code=204)


@router.get("/recent-items", summary="The last items that finished in the caller's newest batches")
async def recent_items(
    services: ServicesDep,
    caller: CallerDep,
    batches: Annotated[int, Query(ge=1, le=20, description="How many of the newest batches.")] = 3,
    per_batch: Annotated[int, Query(ge=1, le=1000, description="Most finished items of each.")] = 100,
) -> reading.RecentItems:
    """Each item's batch, index, id, server, tool, status, worker, rate wait, call time and end: what the dashboard
    tells of recent work per backend and per worker, in one request."""
    return await reading.recent_items(services, caller, batches, per_batch)


# `:item_path`: ids are the caller's data and may hold '/' ("reports/2024"); the item answers with it sent encoded
# (%2F) or as is (a proxy may decode %2F). Only `.../input`, where an item's question is answered, lives below it.
@router.get(
    "/batches/{batch_id}/items/{item_id:item_path}",
    summary="One item, whole, paging through large content",
    responses=_NOT_FOUND,
)
async def get_item(
    batch_id: OwnedBatchId,
    item_id: str,
    services: ServicesDep,
    cursor: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=500,
            pattern=r"^[A-Za-z0-9_-]+$",
            description="`next_cursor` of a truncated copy of this item or of the last page; 422 naming why when it "
            "does not verify or is another item's.",
        ),
    ] = None,
) -> ItemPage:
    """The stored item, whole when it fits one response (`MCP_BATCH_RESPONSE_MAX_BYTES`); else as much of it as one
    holds — `meta` and structured content whole when they fit, content cut on a character boundary — with
    `next_cursor` for the rest of the content, page by page."""
    return await reading.item(services, batch_id, item_id, cursor)


@router.get(
    "/batches/{batch_id}/results",
    summary="Finished items as JSON Lines, in finish order",
    response_class=StreamingResponse,
    responses={200: {"content": {_NDJSON: {}}, "description": "One ItemResult (with `seq`) per line."}, **_NOT_FOUND},
)
async def stream_results(
    batch_id: OwnedBatchId,
    services: ServicesDep,
    status: Annotated[
        str | None,
        Query(description="Only these item statuses, comma-separated.", json_schema_extra={"pattern": _STATUSES}),
    ] = None,
    after: Annotated[int, Query(ge=0, description="Only items finished after this `seq` (X-Next-After).")] = 0,
) -> Response:
    """Every finished item since `after`; the `X-Next-After` header is the cursor for the next call."""
    try:
        wanted = {ItemStatus(s) for s in status.split(",")} if status is not None else None  # `status=`: a 422
    except ValueError:
        detail = [{"loc": ["query", "status"], "msg": "a comma-separated list of item statuses", "type": "enum"}]
        return JSONResponse({"detail": detail}, status_code=422)
    found = await reading.results(services, batch_id, wanted, after)
    return StreamingResponse(found.lines, media_type=_NDJSON, headers={"X-Next-After": str(found.next_after)})
