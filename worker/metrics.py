"""The worker's Prometheus metrics, served on a port of its own (`MCP_BATCH_WORKER_METRICS_PORT`, default 9464), on
loopback unless `MCP_BATCH_WORKER_METRICS_HOST` says otherwise (compose sets 0.0.0.0 for its scraper).

The hooks below are called in one line where each event happens (tasks.py, mcp_call.py, gate.py, recovery.py,
main.py). They find this worker's metrics through a context variable set at start-up, which every job, lane and loop
of the worker inherits (an asyncio task copies the context it is created in); outside a worker (a test of the gate
alone) they do nothing. Label values are bounded as mcp_batch/ops/prometheus.py says.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from mcp_batch.errors import BackendError, BackendThrottled
from mcp_batch.ops.prometheus import CALL_BUCKETS, WAIT_BUCKETS, ServerLabels, new_registry

logger = logging.getLogger(__name__)

PORT_SPAN = 16  # a taken port (another worker on this host) moves on to the next, up to this many further

_current: ContextVar[WorkerMetrics | None] = ContextVar("mcp_batch_worker_metrics", default=None)


class WorkerMetrics:
    """One worker's metrics and, once served, its HTTP endpoint."""

    def __init__(self, servers: Iterable[str]) -> None:
        names = list(servers)
        self.server = ServerLabels(names)
        self.registry = r = new_registry()
        self.items = Counter(
            "mcp_batch_items", "Items this worker finished, by server and status.", ["server", "status"], registry=r
        )
        self.call_seconds = Histogram(
            "mcp_batch_call_seconds",
            "Backend call latency, each attempt: from sending the call to its answer, failure or timeout.",
            ["server"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.rate_wait_seconds = Histogram(
            "mcp_batch_rate_wait_seconds",
            "Time each attempt waited for its backend's concurrency lease and rate slot.",
            ["server"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.retries = Counter(
            "mcp_batch_retries",
            "Calls sent again after a transient failure, by server and reason (http_429, http_5xx, connection).",
            ["server", "reason"],
            registry=r,
        )
        self.in_flight = Gauge("mcp_batch_calls_in_flight", "Calls at a backend now.", ["server"], registry=r)
        self.takeovers = Counter(
            "mcp_batch_takeovers", "Shard jobs whose lease lapsed, taken over by this worker's sweep.", registry=r
        )
        self.jobs_running = Gauge("mcp_batch_worker_jobs_running", "Shard jobs this worker runs now.", registry=r)
        for name in names:
            self.in_flight.labels(name)  # shown as 0 from the start, not only once a call has run
        self.endpoint: WSGIServer | None = None
        # Children by label value (bounded, as the labels are): each label lookup takes a lock, per item it adds up.
        self._calls: dict[str, tuple[Any, Any, Any]] = {}
        self._items: dict[tuple[str, str], Any] = {}

    def call_children(self, server: str) -> tuple[Any, Any, Any]:
        """(rate wait, in flight, call seconds) of `server`."""
        label = self.server(server)
        children = self._calls.get(label)
        if children is None:
            children = (
                self.rate_wait_seconds.labels(label),
                self.in_flight.labels(label),
                self.call_seconds.labels(label),
            )
            self._calls[label] = children
        return children

    def items_child(self, server: str, status: str) -> Any:
        """The finished-items counter of `server` and `status`."""
        key = (self.server(server), status)
        child = self._items.get(key)
        if child is None:
            child = self._items[key] = self.items.labels(*key)
        return child

    @property
    def port(self) -> int | None:
        return None if self.endpoint is None else self.endpoint.server_port

    def serve(self, port: int, span: int = PORT_SPAN, host: str = "127.0.0.1") -> None:
        """Serve on `host`:`port` or, when it is taken, the first free port up to `port + span`; without an endpoint
        when `port` is 0 or every one is taken (a worker never stops over its metrics)."""
        if port == 0:
            return
        last = min(port + span, 65_535)
        for candidate in range(port, last + 1):
            try:
                self.endpoint, _ = start_http_server(candidate, addr=host, registry=self.registry)
            except OSError:
                continue
            if candidate != port:
                logger.warning(
                    "metrics port %d is taken (another worker on this host?); serving metrics on port %d instead",
                    port,
                    candidate,
                )
            else:
                logger.info("serving metrics on %s port %d", host, candidate)
            return
        logger.warning("metrics ports %d-%d are all taken; this worker runs without a metrics endpoint", port, last)

    async def close(self) -> None:
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            await asyncio.to_thread(endpoint.shutdown)  # waits for its serving thread's poll loop to end
            endpoint.server_close()


def start(servers: Iterable[str], port: int, host: str = "127.0.0.1") -> WorkerMetrics:
    """This worker's metrics, bound to the current context (the worker's main task) and served on `host`:`port`."""
    metrics = WorkerMetrics(servers)
    _current.set(metrics)
    metrics.serve(port, host=host)
    return metrics


def item_finished(server: str, status: str) -> None:
    """A lane finished an item (whatever its status)."""
    m = _current.get()
    if m is not None:
        m.items_child(server, status).inc()


class InFlight:
    """A call that passed its backend's gate: counted in flight, and timed, until `end`."""

    __slots__ = ("_call_seconds", "_in_flight", "_start")

    def __init__(self, call_seconds: Any = None, in_flight: Any = None) -> None:
        self._call_seconds, self._in_flight = call_seconds, in_flight
        self._start = time.perf_counter()

    def end(self) -> None:
        if self._in_flight is not None:
            self._call_seconds.observe(time.perf_counter() - self._start)
            self._in_flight.dec()


def admitted(server: str, waited: float) -> InFlight:
    """A call passed its backend's gate after `waited` seconds: in flight until the returned object's `end`."""
    m = _current.get()
    if m is None:
        return InFlight()
    rate_wait, in_flight, call_seconds = m.call_children(server)
    rate_wait.observe(waited)
    in_flight.inc()
    return InFlight(call_seconds, in_flight)


def retry_reason(exc: BaseException) -> str:
    """Why a call is sent again: the backend answered 429, a 5xx, or the connection broke."""
    if isinstance(exc, BackendThrottled):
        return "http_429"
    if isinstance(exc, BackendError) and " answered HTTP " in str(exc):  # mcp_call's message for an HTTP status
        return "http_5xx"
    return "connection"


def retried(server: str, exc: BaseException) -> None:
    """A call failed transiently and is about to be sent again."""
    m = _current.get()
    if m is not None:
        m.retries.labels(m.server(server), retry_reason(exc)).inc()


def took_over() -> None:
    """This worker's sweep took over a shard job whose lease had lapsed."""
    m = _current.get()
    if m is not None:
        m.takeovers.inc()


@contextmanager
def job_running() -> Iterator[None]:
    """A shard job runs on this worker until the block ends."""
    m = _current.get()
    if m is None:
        yield
        return
    with m.jobs_running.track_inprogress():
        yield
