"""What the API tells callers about its backends: `GET /v1/servers` and the MCP `list_servers` tool show the same; and
the service's state as one reading (`GET /v1/overview`, for the dashboard: readiness, the queue, leases)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from mcp_batch.backend_info import ServerInfo
from mcp_batch.errors import BackendError, BackendUnauthenticated
from mcp_batch.store import overview
from mcp_batch.tenants import ANYONE, Caller
from service.application.services import Services
from service.application.tool_lists import tools_of


async def describe_servers(services: Services, caller: Caller = ANYONE) -> list[ServerInfo]:
    """Every configured backend the caller may call, with its limits, their current use and its cached tools; never
    headers or env.

    A backend that cannot be reached is listed with `tools: null` and `tools_error`, so one of them does not hide the
    others; one the tenant has not connected (its own credential missing or refused), with `connect` too.
    """
    names = [name for name in services.registry.names if caller.may_call(name)]
    return list(await asyncio.gather(*(describe_server(services, name, caller.tenant) for name in names)))


async def describe_server(services: Services, name: str, tenant: str) -> ServerInfo:
    """One configured backend, as `describe_servers` lists it to `tenant`: a backend that takes the tenant's own
    credential with the tools that credential lists, or `connect` when it has none the backend takes."""
    info = services.registry.info(name, services.settings.default_timeout_seconds)
    backend = services.registry.get(name)
    if backend is not None and backend.max_concurrency:
        info.in_flight = await services.leases.in_use(name)
    if backend is not None and backend.rate_limit:
        info.rate_tokens_available = round(await services.rate.tokens(name, backend.rate_limit), 3)
    try:
        info.tools = await tools_of(services, name, tenant)
    except BackendUnauthenticated as exc:
        if exc.connect is None:  # the operator's own credential refused: a fault like any other backend's
            info.tools_error = f"could not list tools: {exc}"
        else:  # the tenant's to give: the route that connects it
            info.tools_error, info.connect = str(exc), exc.connect
    except BackendError as exc:  # the root cause, in words; one unreachable backend must not hide the others
        info.tools_error = f"could not list tools: {exc}"
    except TimeoutError:
        info.tools_error = f"could not list tools: no answer within {services.settings.connect_timeout_seconds:g}s"
    except Exception as exc:
        info.tools_error = f"could not list tools: {type(exc).__name__}"
    return info


class BackendUse(BaseModel):
    """A backend the caller may call, and the concurrency leases held on it now, across all workers."""

    name: str
    leases_in_use: int


class ServiceState(BaseModel):
    """The service's state, from one reading of Redis: what /readyz and /metrics tell, as JSON."""

    ready: bool = Field(description="A worker sent a heartbeat within MCP_BATCH_READY_WORKER_SECONDS.")
    reason: str | None = Field(description="Why the service is not ready; null when it is.")
    workers: int = Field(description="Live workers.")
    queue_depth: int = Field(description="Shard jobs in the queue, waiting or running.")
    unfinished_items: int = Field(description="Items of unfinished batches not yet finished, every tenant's.")
    job_leases: int = Field(description="Shard job leases held.")
    job_leases_lapsed: int = Field(description="Shard job leases lapsed and not yet taken over.")
    backends: list[BackendUse] = Field(description="The backends the caller's key may call.")


async def service_state(services: Services, caller: Caller = ANYONE) -> ServiceState:
    """Readiness (as /readyz counts live workers), the queue, unfinished items and leases (as /metrics shows them),
    the caller's backends."""
    settings = services.settings
    found = await overview.read(
        services.redis, services.keys, services.registry, settings.default_timeout_seconds, services.store.data
    )
    within = settings.ready_worker_seconds
    alive = len(found.alive(within))
    backends = [
        BackendUse(name=b.name, leases_in_use=b.leases_in_use) for b in found.backends if caller.may_call(b.name)
    ]
    return ServiceState(
        ready=alive > 0,
        reason=None if alive else f"no worker has sent a heartbeat in the last {within:g} s",
        workers=alive,
        queue_depth=found.queue_depth,
        unfinished_items=found.unfinished_items,
        job_leases=found.job_leases,
        job_leases_lapsed=found.job_leases_lapsed,
        backends=backends,
    )
