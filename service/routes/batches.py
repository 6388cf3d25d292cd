"""The batch routes: submit, read (optionally waiting for the end)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from ..core.models import BatchDocument, BatchRequest
from ..deps import ServicesDep

router = APIRouter(prefix="/v1", tags=["batches"])


@router.post("/batches", status_code=202, summary="Submit a batch of MCP tool calls")
async def submit_batch(request: BatchRequest, services: ServicesDep, response: Response) -> BatchDocument:
    """Validate the whole batch, store it and queue it; answers at once with the (queued) document."""
    batch_id = await services.submit(request)
    response.headers["Location"] = f"/v1/batches/{batch_id}"
    return await services.store.document(batch_id)


@router.get("/batches/{batch_id}", summary="The batch document (optionally waiting for the batch to finish)")
async def get_batch(
    batch_id: str,
    services: ServicesDep,
    wait: Annotated[float, Query(ge=0, le=60, description="Hold the request up to this many seconds for the end.")] = 0,
    offset: Annotated[int, Query(ge=0, description="First item of `results` to return.")] = 0,
    limit: Annotated[int | None, Query(ge=1, le=10_000, description="Most items of `results` to return.")] = None,
) -> BatchDocument:
    if wait > 0:
        await services.store.wait(batch_id, min(wait, services.settings.max_wait_seconds))
    return await services.store.document(batch_id, offset, limit)
