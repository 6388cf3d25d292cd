"""The dry run's estimate of a batch's wall time: pure arithmetic over what the store and the servers file know.

Each limit that applies gives the time it alone needs to get the batch's calls through, and the largest one is the
bound (docs/api.md states the method):
- the longest single call: no batch ends before its slowest call does, however many lanes it has (the latency of
  the slowest tool it calls);
- a backend's rate limit: its calls and the items queued ahead for it (the tenant's own live batches', counted in
  full) after the first burst, at the limit's rate, plus one call's latency (the last call's own);
- the tenant's share of that rate, when the caller's key has one: the same at the share's rate and burst;
- a backend's concurrency cap: its calls and those queued ahead, each as long as its tool's recent latency, spread
  over the cap;
- the batch's `max_concurrency` (one lane in serial mode): the latency of all its calls spread over its lanes.
A call whose tool has no latency observed yet counts in the rate bounds only, and the estimate says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mcp_batch.backends.priority import rate_of
from mcp_batch.backends.servers_file import Backend
from mcp_batch.dry_runs import BackendLoad, Bound, BoundKind, Estimate, ToolLatency
from mcp_batch.store.backlog import Queued


@dataclass(frozen=True)
class Plan:
    """What the estimate is asked about: the calls that would be dispatched, and who sends them how."""

    calls: Counter[tuple[str, str]]  # (server, tool) -> calls that would be dispatched
    lanes: int  # calls of the batch in flight at once: its max_concurrency, one in serial mode
    tenant: str
    rate_share: float | None  # the caller's key's share of each backend's rate, if it has one


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def estimate(
    plan: Plan,
    backends: Mapping[str, Backend],
    queued: Queued,
    latencies: Mapping[tuple[str, str], Sequence[float]],
) -> Estimate:
    """The estimate of `plan` under `backends`' limits, with `queued` work ahead and the `latencies` observed."""
    means = {pair: _mean(latencies.get(pair, ())) for pair in plan.calls}
    latency = [
        ToolLatency(server=s, tool=t, calls=n, samples=len(latencies.get((s, t), ())), mean_seconds=means[s, t])
        for (s, t), n in sorted(plan.calls.items())
    ]
    unknown = [f"{s}/{t}" for (s, t), mean in sorted(means.items()) if mean is None]
    per_server: Counter[str] = Counter()
    busy: dict[str, float] = {}  # seconds of known latency each backend's calls take, one after another
    for (server, tool), n in plan.calls.items():
        per_server[server] += n
        busy[server] = busy.get(server, 0.0) + n * (means[server, tool] or 0.0)
    bounds, loads = [], []
    known_means = {pair: mean for pair, mean in means.items() if mean is not None}
    if known_means:
        (server, tool), slowest = max(known_means.items(), key=lambda found: found[1])
        why = f"{server}/{tool} takes {slowest:.3f} s, its recent latency"
        bounds.append(Bound(kind=BoundKind.longest_call, server=server, seconds=slowest, explanation=why))
    for server, n in sorted(per_server.items()):
        backend = backends.get(server)
        if backend is None:
            continue
        tools = [pair for pair in plan.calls if pair[0] == server]
        known = [mean for pair in tools if (mean := means[pair]) is not None]
        tail = max(known, default=0.0)
        ahead = queued.by_tenant.get((plan.tenant, server), 0)  # another tenant's work is never counted here
        load = BackendLoad(server=server, calls=n, queued_ahead=ahead, max_concurrency=backend.max_concurrency)
        if backend.rate_limit:
            limit = backend.rate_limit
            rate = rate_of(limit)
            burst = limit.burst or 1
            bounds.append(_rate_bound(BoundKind.rate_limit, server, n, ahead, rate, burst, tail))
            if plan.rate_share is not None:
                rate, burst = rate * plan.rate_share, max(1, int(burst * plan.rate_share))
                bounds.append(_rate_bound(BoundKind.tenant_rate_share, server, n, ahead, rate, burst, tail))
            load.rate_per_second, load.burst = round(rate, 6), burst
        if backend.max_concurrency and known:
            per_call = busy[server] / n if len(known) == len(tools) else tail  # an unknown tool: as the slowest known
            seconds = (n + ahead) * per_call / backend.max_concurrency
            why = f"{n + ahead} calls ({ahead} queued ahead) of {per_call:.3f} s, {backend.max_concurrency} at once"
            bounds.append(Bound(kind=BoundKind.backend_concurrency, server=server, seconds=seconds, explanation=why))
        loads.append(load)
    work = sum(busy.values())
    if work > 0:
        why = f"{work:.3f} s of calls (their tools' recent latency) over {plan.lanes} lane(s)"
        bounds.append(Bound(kind=BoundKind.max_concurrency, seconds=work / plan.lanes, explanation=why))
    bounds = sorted((b.model_copy(update={"seconds": round(b.seconds, 3)}) for b in bounds), key=lambda b: -b.seconds)
    return Estimate(
        seconds=bounds[0].seconds if bounds else None,
        complete=not unknown,
        bound=bounds[0] if bounds else None,
        bounds=bounds,
        backends=loads,
        latency=latency,
        unknown_latency=unknown,
    )


def _rate_bound(kind: BoundKind, server: str, n: int, ahead: int, rate: float, burst: int, tail: float) -> Bound:
    seconds = max(0, n + ahead - burst) / rate + tail
    who = "the tenant's share of the rate" if kind is BoundKind.tenant_rate_share else "the rate limit"
    why = f"{n} calls and {ahead} queued ahead at {rate:g}/s ({who}) after a burst of {burst}"
    if tail:
        why += f", plus the last call's {tail:.3f} s"
    return Bound(kind=kind, server=server, seconds=seconds, explanation=why)
