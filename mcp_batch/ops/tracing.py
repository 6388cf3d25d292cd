"""Traces (OpenTelemetry): one trace per batch, from its submit to each item's call and the MCP SDK's spans under it.

    submit (API)  ->  traceparent stored with the batch  ->  shard job (worker)  ->  item  ->  SDK client span
                                                                          ->  the backend's server span (via `_meta`)

The code uses only the OpenTelemetry API. The SDK and the OTLP/HTTP exporter (the `tracing` extra) are set up by
`configure`, which each process calls at start-up, and only when the standard OTEL_* variables ask for traces:
OTEL_TRACES_EXPORTER set to otlp or console, or an OTLP endpoint set, and OTEL_SDK_DISABLED not true. Until then
`active()` is False, no span of ours is made, and an item costs one `is None` check.

Spans carry ids, indexes, server and tool names, statuses, error codes, rate-wait seconds and attempts: never
argument values, results, headers or error messages (those may quote an argument); FastAPI's HTTP spans carry the
query's names, their values taken out.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer

from mcp_batch.ops.redaction import QUERY_ATTRIBUTES, URL_ATTRIBUTES, redacted_query, redacted_url

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Span as SdkSpan
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from mcp_batch.records import ItemRecord
    from mcp_batch.store.claims import Claim

logger = logging.getLogger(__name__)

NAME = "mcp_batch"  # the instrumentation scope
_OFF: AbstractContextManager[None] = nullcontext()  # reusable: what every span helper returns when tracing is off
_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def wanted(env: Mapping[str, str]) -> bool:
    """Whether these OTEL_* variables ask for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure(service: str, env: Mapping[str, str] = os.environ) -> bool:
    """Set up the SDK and its exporters when `env` asks for traces (once per process); whether tracing is on.
    `service` is the service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one."""
    if _tracer is not None:
        return True
    if not wanted(env):
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        logger.warning("OTEL_* variables ask for traces, but the `tracing` extra is not installed: no traces")
        return False
    resource = Resource.create()  # reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").lower().split(",") if n.strip()]
    for name in names:
        exporter: SpanExporter
        if name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            if protocol not in (None, "", "http/protobuf"):
                logger.warning("OTLP protocol %r is not supported; traces are sent as http/protobuf", protocol)
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # endpoint, headers, timeout: from OTEL_EXPORTER_OTLP_*
        elif name == "console":
            exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout may be a stdio backend's MCP channel
        else:
            logger.warning("unknown OTEL_TRACES_EXPORTER %r ignored (otlp, console, none)", name)
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))  # batched off the event loop, in a thread
    install(provider)
    logger.info("traces on: %s exporting to %s", resource.attributes.get(SERVICE_NAME), ", ".join(names))
    return True


def _own_random_ids() -> Any:
    """The SDK's random ids drawn from a generator of their own: its default draws from the random module's global
    state, so every span would move the state that code around it (a property test's engine, a seeded draw) sees."""
    import random

    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    draws = random.Random()

    class OwnRandomIds(RandomIdGenerator):
        def generate_span_id(self) -> int:
            span_id = draws.getrandbits(64)
            while span_id == trace.INVALID_SPAN_ID:
                span_id = draws.getrandbits(64)
            return span_id

        def generate_trace_id(self) -> int:
            trace_id = draws.getrandbits(128)
            while trace_id == trace.INVALID_TRACE_ID:
                trace_id = draws.getrandbits(128)
            return trace_id

    return OwnRandomIds()


def install(provider: TracerProvider) -> None:
    """Make `provider` the process's tracer provider and turn our spans on (`configure` does; so do tests). Every
    span's URL attributes get their query values taken out as the span starts (FastAPI's HTTP spans set them then)."""
    global _tracer, _provider
    provider.id_generator = _own_random_ids()
    provider.add_span_processor(_query_redactor())
    trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = provider.get_tracer(NAME)


def active() -> bool:
    return _tracer is not None


def flush(timeout_ms: int = 5_000) -> None:
    """Export what is buffered (at shut-down: the process may be killed before its exit hook runs)."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


def traceparent() -> str | None:
    """The current span's W3C traceparent, to store with a batch; None when tracing is off or no span is current."""
    if _tracer is None:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def _span(name: str, kind: SpanKind, attributes: dict[str, Any], parent: str | None = None) -> Iterator[Span]:
    assert _tracer is not None
    context = None if parent is None else extract({"traceparent": parent})
    # Exceptions are not recorded: their messages may quote an argument. Their type is enough.
    with _tracer.start_as_current_span(
        name, context, kind, attributes, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(StatusCode.ERROR)
            raise


def submit_span(calls: int) -> AbstractContextManager[Span | None]:
    """The span of one submit: the trace's root (a producer: the shard jobs it queues are its consumers)."""
    if _tracer is None:
        return _OFF
    return _span("mcp_batch submit", SpanKind.PRODUCER, {"mcp_batch.batch.calls": calls})


def submitted(span: Span | None, batch_id: str, created: bool) -> None:
    if span is not None:
        span.set_attributes({"mcp_batch.batch.id": batch_id, "mcp_batch.batch.created": created})


def shard_span(
    parent: str | None, batch_id: str, job: str, shard: int, lanes: int
) -> AbstractContextManager[Span | None]:
    """A shard job's span, a child of the submit span through the batch's stored traceparent `parent`."""
    if _tracer is None:
        return _OFF
    attributes = {"mcp_batch.batch.id": batch_id, "mcp_batch.job": job, "mcp_batch.shard": shard}
    return _span("mcp_batch shard", SpanKind.CONSUMER, attributes | {"mcp_batch.lanes": lanes}, parent)


def item_span(batch_id: str, claim: Claim) -> AbstractContextManager[Span | None]:
    """One item's span, current while its call is sent, so the MCP SDK's client span is its child."""
    if _tracer is None:
        return _OFF
    attributes = {
        "mcp_batch.batch.id": batch_id,
        "mcp_batch.item.id": claim.id,
        "mcp_batch.item.index": claim.index,
        "mcp_batch.server": claim.server,
        "mcp_batch.tool": claim.tool,
    }
    if claim.recovered:
        attributes["mcp_batch.item.recovered"] = True
    return _span(f"mcp_batch item {claim.tool}", SpanKind.INTERNAL, attributes)


def item_finished(span: Span | None, record: ItemRecord) -> None:
    """The outcome on the item's span: status, error code, attempts, rate-wait."""
    if span is None:
        return
    attributes: dict[str, Any] = {"mcp_batch.item.status": record["status"]}
    if "attempts" in record:
        attributes["mcp_batch.item.attempts"] = record["attempts"]
    if "rate_wait_seconds" in record:
        attributes["mcp_batch.item.rate_wait_seconds"] = record["rate_wait_seconds"]
    error = record.get("error")
    if error is not None:
        attributes["error.type"] = error["code"]
        span.set_status(StatusCode.ERROR)
    span.set_attributes(attributes)


def _query_redactor() -> SpanProcessor:
    from opentelemetry.sdk.trace import SpanProcessor

    class RedactQueries(SpanProcessor):
        """Query values out of `url.query`, `url.full` and the like, at the start of each span."""

        def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
            for key, value in dict(span.attributes or {}).items():
                if isinstance(value, str) and key in QUERY_ATTRIBUTES:
                    span.set_attribute(key, redacted_query(value))
                elif isinstance(value, str) and key in URL_ATTRIBUTES and "?" in value:
                    span.set_attribute(key, redacted_url(value))

    return RedactQueries()
