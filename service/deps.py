"""Request dependencies as Annotated aliases: the services the lifespan built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from arq import ArqRedis
from fastapi import Depends, Request

from .core.backends import Registry
from .core.catalog import Catalog
from .core.keys import Keys
from .core.limits import LeaseSemaphore, RateLimiter
from .core.settings import Settings
from .core.store import Store


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


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
