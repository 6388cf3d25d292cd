"""Calls that carry a `cursor` (an earlier item's `next_cursor`): the result is the next page of that truncated item
of the same server, tool and arguments, read from the store; the backend is not called.

The cursor must verify under the service's key, belong to the batch's tenant, and name an item that still exists
(cursors expire with their batch) and whose call had this call's server, tool and arguments; otherwise the item
ends `invalid_cursor`, saying why and never repeating the cursor.
"""

from __future__ import annotations

from mcp_batch import records
from mcp_batch.contract import budget, document
from mcp_batch.contract.item_cursors import CursorKey, Position, cursor_length, locate
from mcp_batch.errors import InvalidCursor
from mcp_batch.keys import is_batch_id
from mcp_batch.models import TERMINAL_ITEM, ItemResult, ItemStatus
from mcp_batch.records import ItemRecord, error_info
from mcp_batch.store import Store
from mcp_batch.store.claims import Claim


class CursorPages:
    """Answers cursor calls from the store."""

    def __init__(self, store: Store, key: CursorKey, page_bytes: int) -> None:
        self.store = store
        self.key = key
        self.page_bytes = page_bytes  # a page as large as the item route's

    async def answer(self, claim: Claim, tenant: str, build: records.Builder) -> ItemRecord:
        """The record of a call with a cursor: the page it points at, or `invalid_cursor`."""
        try:
            return await self._page(claim, tenant, build)
        except InvalidCursor as exc:
            error = error_info("invalid_cursor", exc.reason, "validation")
            return build(ItemStatus.invalid_cursor, error=error, attempts=0)

    async def _page(self, claim: Claim, tenant: str, build: records.Builder) -> ItemRecord:
        at = self.key.open(claim.cursor or "", tenant)
        stored = await self.store.reads.at(at.batch_id, at.index) if is_batch_id(at.batch_id) else None
        if stored is None or stored.row.tenant != tenant:
            raise InvalidCursor("the batch the cursor came from no longer exists (cursors expire with their batch)")
        spec, source = stored.spec, ItemResult.model_validate(document.item(stored))
        if (spec.server, spec.tool, spec.arguments) != (claim.server, claim.tool, claim.arguments):
            raise InvalidCursor("the cursor belongs to a call with another server, tool or arguments")
        if source.status not in TERMINAL_ITEM:
            raise InvalidCursor("the item the cursor came from has not finished")
        item = source.model_dump(mode="json")
        page, resume = budget.page(item, locate(item, at), self.page_bytes, cursor_length(at.batch_id))
        following = page.get("next_cursor")
        if resume is not None:
            following = self.key.issue(tenant, Position(at.batch_id, at.index, *resume))
        failure = source.error
        error = error_info(failure.code, failure.message, failure.type, **(failure.details or {})) if failure else None
        return build(
            source.status,
            error=error,
            content=page["content"],
            is_error=source.is_error,
            next_cursor=following,
            attempts=0,
        )
