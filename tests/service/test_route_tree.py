"""The FastAPI internal that service/route_tree.py reads (a route's `Dependant` tree), pinned: a new FastAPI must be
checked by hand (and pyproject's pin moved) before it is taken."""

from __future__ import annotations

from typing import Annotated

import fastapi
from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel

from service import route_tree


class Thing(BaseModel):
    name: str


def caller(key: Annotated[str | None, Query(alias="api-key")] = None) -> str:
    return key or ""


def owned(thing_id: str, who: Annotated[str, Depends(caller)]) -> str:
    return thing_id


router = APIRouter()


@router.post("/things/{thing_id}")
async def update(
    thing: Thing, thing_id: Annotated[str, Depends(owned)], dry: Annotated[bool, Query()] = False
) -> None: ...


@router.post("/notes")
async def note(text: Annotated[str, Body(embed=True)]) -> None: ...


@router.get("/things")
async def listing(limit: int = 10) -> None: ...


def test_the_fastapi_version_is_the_one_route_tree_was_checked_against() -> None:
    assert fastapi.__version__.startswith("0.165."), f"FastAPI {fastapi.__version__}: check route_tree.py, then the pin"


def test_a_routes_query_parameters_and_body_model_are_read_however_deep_its_dependencies_go() -> None:
    update_route, note_route, listing_route = router.routes
    assert isinstance(update_route, fastapi.routing.APIRoute)
    assert route_tree.query_names(update_route) == {"dry", "api-key"}
    assert route_tree.body_model(update_route) is Thing
    assert route_tree.takes_body(update_route)
    assert isinstance(note_route, fastapi.routing.APIRoute) and isinstance(listing_route, fastapi.routing.APIRoute)
    assert route_tree.takes_body(note_route) and route_tree.body_model(note_route) is None  # embedded: no model
    assert not route_tree.takes_body(listing_route) and route_tree.query_names(listing_route) == {"limit"}
