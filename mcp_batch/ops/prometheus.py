"""Prometheus metrics, every name prefixed `mcp_batch_`; each process keeps its own registry (never the library's
global one, so an API and a worker sharing a test process keep theirs apart).

The API's are here: counters of submitted batches and of HTTP requests, plus gauges read from Redis at scrape time
(mcp_batch/store/overview.py). The worker's are in worker/worker_metrics.py.

Label values stay few whatever callers send: a server label is a configured server's name or `_unknown` (a batch may
name any server), a route label is the matched route's template (`/v1/batches/{batch_id}`, never the raw path), a
method label one of the standard methods or `other`. No label ever holds an argument, a header or an env value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mcp_batch.store.overview import Overview

NAMESPACE = "mcp_batch"
UNKNOWN_SERVER = "_unknown"
UNMATCHED_ROUTE = "_unmatched"
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ServerLabels:
    """A server name as a label value: the configured names as they are, any other name `_unknown`."""

    def __init__(self, configured: Iterable[str]) -> None:
        self._configured = frozenset(configured)

    def __call__(self, server: str) -> str:
        return server if server in self._configured else UNKNOWN_SERVER


def new_registry() -> CollectorRegistry:
    """A registry of this process's own, with its CPU, memory and file descriptors as `mcp_batch_process_*`."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(namespace=NAMESPACE, registry=registry)
    return registry


class ApiMetrics:
    """The API process's metrics."""

    def __init__(self) -> None:
        self.registry = new_registry()
        self.batches_submitted = Counter(
            "mcp_batch_batches_submitted", "Batches stored and queued, through any door.", registry=self.registry
        )
        self.http_requests = Counter(
            "mcp_batch_http_requests",
            "HTTP requests answered, by route template, method and status code.",
            ["route", "method", "status"],
            registry=self.registry,
        )

    def batch_submitted(self) -> None:
        self.batches_submitted.inc()

    def request_answered(self, route: str, method: str, status: int) -> None:
        self.http_requests.labels(route, method if method in _METHODS else "other", str(status)).inc()

    def render(self, overview: Overview | None, alive_within: float) -> bytes:
        """The text exposition: this process's counters, then the shared state (`overview`; None: Redis is down)."""
        return generate_latest(self.registry) + generate_latest(_Shared(overview, alive_within))


class _Shared(Collector):
    """Gauges of the state every process shares, from one reading of Redis."""

    def __init__(self, overview: Overview | None, alive_within: float) -> None:
        self.overview = overview
        self.alive_within = alive_within

    def collect(self) -> Iterator[Metric]:
        o = self.overview
        yield GaugeMetricFamily("mcp_batch_redis_up", "1 when Redis answered this scrape, else 0.", value=o is not None)
        if o is None:
            return
        yield GaugeMetricFamily(
            "mcp_batch_queue_depth", "Shard jobs in the arq queue, waiting or running.", value=o.queue_depth
        )
        yield GaugeMetricFamily(
            "mcp_batch_unfinished_items", "Items of unfinished batches not yet finished.", value=o.unfinished_items
        )
        yield GaugeMetricFamily(
            "mcp_batch_workers_live",
            "Workers whose last heartbeat is at most MCP_BATCH_READY_WORKER_SECONDS old.",
            value=len(o.alive(self.alive_within)),
        )
        yield GaugeMetricFamily("mcp_batch_job_leases", "Shard job leases held.", value=o.job_leases)
        yield GaugeMetricFamily(
            "mcp_batch_job_leases_lapsed", "Shard job leases lapsed, not yet taken over.", value=o.job_leases_lapsed
        )
        leases = GaugeMetricFamily(
            "mcp_batch_backend_leases",
            "Concurrency leases held, all workers, per configured server.",
            labels=["server"],
        )
        for backend in o.backends:
            leases.add_metric([backend.name], backend.leases_in_use)
        yield leases
