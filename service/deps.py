"""Request dependencies as Annotated aliases: the services the lifespan built."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from .core.errors import BatchNotFound
from .core.keys import is_batch_id
from .core.services import Services


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def known_batch_id(request: Request) -> None:
    """A `batch_id` path parameter that cannot name a batch is a 404 before any lookup (see `keys.is_batch_id`)."""
    batch_id = request.path_params.get("batch_id")
    if batch_id is not None and not is_batch_id(batch_id):
        raise BatchNotFound(batch_id)
