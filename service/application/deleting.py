"""Deleting an ended batch: every door deletes through `delete`, after its own check that the batch is the caller's
(`owned`), so another tenant's batch is as missing as one that never was."""

from __future__ import annotations

from mcp_batch.tenants import Caller, Right, require
from service.application.services import Services


async def delete(services: Services, caller: Caller, batch_id: str) -> None:
    """Remove the ended batch whole (its keys, its place in its tenant's list and metadata indexes, its
    Idempotency-Key, its stored bytes, a webhook not yet delivered); then it reads as missing. BatchNotEnded (with
    its status) for a batch still queued, running or cancelling: cancel it first. A delete cannot be undone, so it
    needs the `write` right (Forbidden otherwise)."""
    require(caller, Right.write, "deleting a batch")
    await services.store.deletion.delete(batch_id)
