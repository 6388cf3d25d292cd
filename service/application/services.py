"""The long-lived objects the API builds at start-up, which every use case is handed (`Services`), and the one
check every door makes before it touches a batch (`owned`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from arq import ArqRedis

from mcp_batch.backends.catalog import Catalog
from mcp_batch.backends.limits import LeaseSemaphore, RateLimiter
from mcp_batch.backends.servers_file import Registry
from mcp_batch.contract.item_cursors import CursorKey
from mcp_batch.credentials.hooks import NoRevocation, Revoker
from mcp_batch.errors import BatchNotFound
from mcp_batch.keys import Keys, is_batch_id
from mcp_batch.ops.prometheus import ApiMetrics
from mcp_batch.settings import Settings
from mcp_batch.store import Store
from mcp_batch.tenants import Caller


@dataclass(frozen=True)
class Services:
    """What the lifespan opened, shared by every request."""

    settings: Settings
    keys: Keys
    registry: Registry
    redis: ArqRedis
    store: Store
    catalog: Catalog
    rate: RateLimiter
    leases: LeaseSemaphore
    cursors: CursorKey  # signs and opens the cursors of truncated items
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    revoker: Revoker = field(default_factory=NoRevocation)  # revokes a deleted OAuth grant at its server


async def owned(services: Services, batch_id: str, caller: Caller) -> str:
    """The batch id, when the batch exists and is the caller's; else BatchNotFound (another tenant's batch is
    indistinguishable from a missing one). An id that cannot name a batch is never looked up."""
    if not is_batch_id(batch_id) or await services.store.tenants.tenant_of(batch_id) != caller.tenant:
        raise BatchNotFound(batch_id)
    return batch_id
