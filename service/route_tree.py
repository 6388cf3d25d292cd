"""A FastAPI route's dependency tree, read for the strict body and query checks (service/bodies/strict_route.py):
the query parameters it takes, whether it reads a body, its body's model.

The one place that reads FastAPI's `Dependant` (`fastapi.dependencies.models`, not a public API): pyproject pins
FastAPI's minor version for it, and tests/service/test_route_tree.py fails if its shape changes.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel


def _nodes(route: APIRoute) -> Iterator[Dependant]:
    """The route's own parameters, then every dependency's, however deep."""
    pending = [route.dependant]
    while pending:
        node = pending.pop()
        yield node
        pending.extend(node.dependencies)


def query_names(route: APIRoute) -> set[str]:
    """The query parameters the route takes, its dependencies' included."""
    return {param.alias for node in _nodes(route) for param in node.query_params}


def takes_body(route: APIRoute) -> bool:
    """Whether the route reads a body at all."""
    return any(node.body_params for node in _nodes(route))


def body_model(route: APIRoute) -> type[BaseModel] | None:
    """The model of the endpoint's one (not embedded) body parameter, if it has one."""
    params = route.dependant.body_params
    if len(params) != 1 or getattr(params[0].field_info, "embed", False):
        return None
    annotation = params[0].field_info.annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
