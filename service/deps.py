"""Request dependencies as Annotated aliases: the services the lifespan built, the caller, the caller's batch."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.application.services import Services, owned
from service.auth import CallerDep


async def get_services(request: Request) -> Services:  # a coroutine: FastAPI would run a function in a thread
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def owned_batch(batch_id: str, caller: CallerDep, services: ServicesDep) -> str:
    """The path's batch id, when that batch is the caller's (404 otherwise, as for a missing one)."""
    return await owned(services, batch_id, caller)


OwnedBatchId = Annotated[str, Depends(owned_batch)]
