"""The long-lived objects the API builds at start-up, and submitting a batch through them.

Every front door (the REST routes, the Gumloop-compatible route, the MCP endpoint) submits through `submit`, so a
batch is validated, stored and queued the same way whichever door it came in by.
"""

from __future__ import annotations

from dataclasses import dataclass

from arq import ArqRedis

from .backends import Registry
from .catalog import Catalog
from .keys import Keys
from .limits import LeaseSemaphore, RateLimiter
from .models import BatchRequest
from .settings import Settings
from .store import Store
from .validation import validate_batch


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

    async def submit(self, request: BatchRequest) -> str:
        """Validate the whole batch (InvalidBatch lists every fault), store it atomically, queue it, wake workers."""
        settings = self.settings
        concurrency = validate_batch(
            request, settings.max_calls_per_batch, settings.max_concurrency_ceiling, settings.default_max_concurrency
        )
        limits = self.registry.limits({call.server for call in request.calls})
        batch_id = await self.store.create(request, concurrency, limits)
        try:
            await self.redis.enqueue_job("run_batch", batch_id, _job_id=batch_id, _queue_name=self.keys.queue)
        except BaseException:
            await self.store.delete(batch_id)  # nothing half-written: a batch that could not be queued does not exist
            raise
        await self.redis.publish(self.keys.wake_channel, batch_id)
        return batch_id
