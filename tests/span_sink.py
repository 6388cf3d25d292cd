"""Where the tests' spans end up: the SDK's in-memory exporter for this process, and an OTLP/HTTP collector on a
loopback port for child processes (workers, backends), which export through the real OTLP exporter, configured by the
standard OTEL_* variables (`Collector.env`). Both give `Seen` spans, so a test can follow one trace across them."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.context import Context
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

from mcp_batch.ops import tracing


@dataclass(frozen=True)
class Seen:
    """One finished span, wherever it was exported from."""

    name: str
    service: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any] = field(hash=False)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


class Collector:
    """An OTLP/HTTP trace receiver (protobuf) on 127.0.0.1; it keeps every span and every raw request body."""

    def __init__(self) -> None:
        self.spans: list[Seen] = []
        self.bodies: list[bytes] = []
        self._changed = threading.Condition()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                collector._receive(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-collector", daemon=True)

    @property
    def env(self) -> dict[str, str]:
        """The OTEL_* variables that send a child process's traces here, within a twentieth of a second."""
        port = self._server.server_address[1]
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }

    def _receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        seen = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    seen.append(
                        Seen(
                            span.name,
                            str(resource.get("service.name", "")),
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex() or None,
                            {a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self._changed:
            self.bodies.append(body)
            self.spans += seen
            self._changed.notify_all()

    def wait(self, done: Callable[[list[Seen]], bool], timeout: float = 20.0) -> list[Seen]:
        """Block until `done(spans)` holds (the spans so far), or fail after `timeout` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: done(list(self.spans)), timeout):
                names = sorted({(s.service, s.name) for s in self.spans})
                raise AssertionError(f"the spans expected did not arrive; got {names}")
            return list(self.spans)

    @contextmanager
    def running(self) -> Iterator[Collector]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()


class Switch(Sampler):
    """Samples only while a test that reads spans runs: the provider is this process's for good (OpenTelemetry
    sets it once), and the other tests of a session should not fill the exporter."""

    on = False

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Iterable[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP, attributes)

    def get_description(self) -> str:
        return "Switch"


_memory: tuple[InMemorySpanExporter, Switch] | None = None


@contextmanager
def in_memory() -> Iterator[InMemorySpanExporter]:
    """This process's spans, into the SDK's in-memory exporter, for the duration."""
    global _memory
    if _memory is None:
        switch, exporter = Switch(), InMemorySpanExporter()
        provider = TracerProvider(sampler=switch)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracing.install(provider)
        _memory = exporter, switch
    exporter, switch = _memory
    exporter.clear()
    switch.on = True
    try:
        yield exporter
    finally:
        switch.on = False
        exporter.clear()


def seen(spans: Iterable[ReadableSpan]) -> list[Seen]:
    """The in-memory exporter's spans as `Seen`."""
    found = []
    for span in spans:
        assert span.context is not None
        found.append(
            Seen(
                span.name,
                str(span.resource.attributes.get("service.name", "")),
                f"{span.context.trace_id:032x}",
                f"{span.context.span_id:016x}",
                None if span.parent is None else f"{span.parent.span_id:016x}",
                dict(span.attributes or {}),
            )
        )
    return found


def named(spans: Iterable[Seen], prefix: str) -> list[Seen]:
    return [span for span in spans if span.name.startswith(prefix)]


def children(spans: Iterable[Seen], parent: Seen) -> list[Seen]:
    return [span for span in spans if span.parent_id == parent.span_id and span.trace_id == parent.trace_id]
