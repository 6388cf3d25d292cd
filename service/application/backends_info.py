"""What the API tells callers about its backends: `GET /v1/servers` and the MCP `list_servers` tool show the same."""

from __future__ import annotations

import asyncio

from mcp_batch.errors import BackendError
from mcp_batch.models import ServerInfo
from mcp_batch.tenants import ANYONE, Caller
from service.application.services import Services


async def describe_servers(services: Services, caller: Caller = ANYONE) -> list[ServerInfo]:
    """Every configured backend the caller may call, with its limits, their current use and its cached tools; never
    headers or env.

    A backend that cannot be reached is listed with `tools: null` and `tools_error`, so one of them does not hide the
    others.
    """
    names = [name for name in services.registry.names if caller.may_call(name)]
    return list(await asyncio.gather(*(describe_server(services, name) for name in names)))


async def describe_server(services: Services, name: str) -> ServerInfo:
    """One configured backend, as `describe_servers` lists it."""
    info = services.registry.info(name, services.settings.default_timeout_seconds)
    backend = services.registry.get(name)
    if backend is not None and backend.max_concurrency:
        info.in_flight = await services.leases.in_use(name)
    if backend is not None and backend.rate_limit:
        info.rate_tokens_available = round(await services.rate.tokens(name, backend.rate_limit), 3)
    try:
        info.tools = await services.catalog.tools(name)
    except BackendError as exc:  # the root cause, in words; one unreachable backend must not hide the others
        info.tools_error = f"could not list tools: {exc}"
    except TimeoutError:
        info.tools_error = f"could not list tools: no answer within {services.settings.connect_timeout_seconds:g}s"
    except Exception as exc:
        info.tools_error = f"could not list tools: {type(exc).__name__}"
    return info
