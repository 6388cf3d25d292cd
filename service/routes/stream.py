"""The progress of a batch as Server-Sent Events: one stream instead of polling or a long wait."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import JSONResponse, StreamingResponse

from service.application.progress import KEEP_ALIVE, Event, progress
from service.auth import AUTH_RESPONSES
from service.bodies import StrictJSONRoute
from service.deps import OwnedBatchId, ServicesDep

router = APIRouter(prefix="/v1", tags=["batches"], route_class=StrictJSONRoute, responses=AUTH_RESPONSES)

_SSE = "text/event-stream"
_SEQ = re.compile(r"[0-9]{1,18}")
_STREAM_DOC = """Events, each `event:` and a one-line JSON `data:`:
- `progress`: `{"status", "counts"}`, first on connecting (before the items that finished earlier, and then with the
  batch's `metadata` too), then whenever they change (after each run of new items);
- `item` (with `id: <seq>`): `{"seq", "index", "id", "status", "server", "tool"}`, once per item, in finish order;
  once the batch has ended, the items that never ran (`skipped`, `cancelled`, `expired`) follow the others;
- `item_progress`: `{"index", "id", "progress", "total", "message", "updated_at"}`, a running item's latest progress
  as its backend reported it, each new report once (no `id:`: not resumed after a reconnect);
- `input_required`: `{"index", "id", "request_id", "kind", "expires_at"}`, once per question a backend asks
  (the question itself is the item's `input_request`; answer it with POST .../items/{item_id}/input);
- `end`: `{"status", "ok", "counts", "finished_at", "metadata"}`, then the stream closes;
- `timeout`: `{"detail", "after"}` when the stream reaches its time limit: reconnect with `Last-Event-ID`;
- `error`: `{"detail"}` when storage fails mid-stream.

A `: keep-alive` comment line comes after 15 s without an event (`MCP_BATCH_EVENTS_HEARTBEAT_SECONDS`)."""


# One event of the stream, as an SSE parser reads it (the `data` line is JSON, described above).
_EVENT_SCHEMA = {
    "type": "object",
    "properties": {"event": {"type": "string"}, "id": {"type": "string"}, "data": {"type": "string"}},
}


def encode(event: Event) -> bytes:
    """One event in the text/event-stream format (the data as compact JSON: orjson writes the strings, integers and
    booleans of an event's data as Python's `json` does with `ensure_ascii=False`)."""
    if event is KEEP_ALIVE:
        return b": keep-alive\n\n"
    head = f"event: {event.name}\n" if event.id is None else f"event: {event.name}\nid: {event.id}\n"
    return head.encode() + b"data: " + orjson.dumps(event.data) + b"\n\n"


def _bad_last_event_id() -> JSONResponse:
    msg = "the seq of an item event: a non-negative integer"
    return JSONResponse({"detail": [{"loc": ["header", "Last-Event-ID"], "msg": msg, "type": "value_error"}]}, 400)


_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {_SSE: {"schema": _EVENT_SCHEMA}}, "description": _STREAM_DOC},
    400: {"description": "`Last-Event-ID` is not an item seq."},
    404: {"description": "No such batch (or it expired)."},
}


@router.get(
    "/batches/{batch_id}/events",
    summary="Progress as Server-Sent Events: each finished item, the counts, then the end",
    response_class=StreamingResponse,
    responses=_RESPONSES,
)
async def batch_events(
    batch_id: OwnedBatchId,
    services: ServicesDep,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="Resume after this item seq (sent by EventSource on reconnect).",
            json_schema_extra={"pattern": f"^{_SEQ.pattern}$"},
        ),
    ] = None,
    after: Annotated[int, Query(ge=0, description="Start after this item seq; Last-Event-ID takes precedence.")] = 0,
) -> Response:
    """Every item that finishes from now on (and those finished after `after`), in finish order, then `end`."""
    if last_event_id is not None:
        if not _SEQ.fullmatch(last_event_id):
            return _bad_last_event_id()
        after = int(last_event_id)
    runs = progress(services, batch_id, after)

    async def body() -> AsyncIterator[bytes]:
        async for events in runs:
            yield b"".join(encode(event) for event in events)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type=_SSE, headers=headers)
