"""The dry run's estimate (contract/estimate.py) from what the service knows now: the servers file's limits, the
caller's tenant's own work queued for each backend and the latencies of its own recent calls (both read from the
store). Another tenant's work and latencies never enter: a dry run cannot watch what another tenant does."""

from __future__ import annotations

from collections import Counter

from mcp_batch.contract.estimate import Plan
from mcp_batch.contract.estimate import estimate as compute
from mcp_batch.dry_runs import DryRunItem, Estimate
from mcp_batch.models import BatchRequest, ItemStatus, Mode
from mcp_batch.tenants import Caller
from service.application.services import Services


def dispatched(results: list[DryRunItem]) -> Counter[tuple[str, str]]:
    """(server, tool) -> the calls of a dry run's `results` that would be dispatched."""
    return Counter((r.server, r.tool) for r in results if r.status is ItemStatus.pending)


async def estimate(
    services: Services, request: BatchRequest, calls: Counter[tuple[str, str]], concurrency: int, caller: Caller
) -> Estimate:
    """How long `request` would take, counting only the calls that would be dispatched (`calls`, from
    `dispatched`); `concurrency` is its effective max_concurrency."""
    dispatched = sum(calls.values())
    lanes = 1 if request.mode is Mode.serial else max(1, min(concurrency, dispatched))
    plan = Plan(calls, lanes, caller.tenant, caller.rate_share)
    backends = {server: b for server in {s for s, _ in calls} if (b := services.registry.get(server)) is not None}
    queued = await services.store.backlog.queued()
    latencies = await services.store.latencies.recent(caller.tenant, calls)
    return compute(plan, backends, queued, latencies)
