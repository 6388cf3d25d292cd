"""One trace per batch, end to end: the submit span in the API, the shard job and each item in the worker, the MCP
SDK's client span under each item, and the backend's server span (another process) under that; across a worker
process too; and no secret or argument value in any span.

This process's spans go to the SDK's in-memory exporter; the backends and worker processes export over OTLP/HTTP to
a collector on a loopback port (tests/span_sink.py), configured by the standard OTEL_* variables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_batch.settings import Settings
from tests.span_sink import Collector, Seen, children, in_memory, named, seen
from tests.support import (
    HttpBackendProcess,
    finished,
    running_api,
    running_service,
    start_http_backend,
    stdio_demo,
    submit,
    worker_processes,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HEADER_SECRET = "sk-SEKRET-header-5b2e"
ENV_SECRET = "sk-SEKRET-env-93d0"
ARG_SECRET = "arg-SEKRET-77af"


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector().running() as running:
        yield running


@pytest.fixture
def memory() -> Iterator[InMemorySpanExporter]:
    with in_memory() as exporter:
        yield exporter


@pytest.fixture
def traced(collector: Collector) -> Iterator[HttpBackendProcess]:
    """A demo backend over HTTP exporting its server spans to the collector; it takes exactly the secret header."""
    backend = start_http_backend(extra_args=["--require-token", HEADER_SECRET], env=collector.env)
    yield backend
    backend.stop()


@pytest.fixture
def servers(
    servers: dict[str, Any], traced: HttpBackendProcess, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    monkeypatch.setenv("MCPB_TEST_TRACE_HEADER", HEADER_SECRET)
    monkeypatch.setenv("MCPB_TEST_TRACE_ENV", ENV_SECRET)
    bearer = {"Authorization": "Bearer ${MCPB_TEST_TRACE_HEADER}"}
    # A stdio backend gets only the environment its entry names: the OTEL_* variables go there.
    env = {"DEMO_TOKEN": "${MCPB_TEST_TRACE_ENV}", **collector.env}
    return servers | {
        "traced": {"url": traced.url, "headers": bearer, "timeout_seconds": 1},
        "traced_stdio": stdio_demo(env=env, timeout_seconds=1),
    }


def echoes(n: int, server: str = "traced") -> list[dict[str, Any]]:
    return [{"id": f"e{i}", "server": server, "tool": "echo", "arguments": {"message": ARG_SECRET}} for i in range(n)]


def one(spans: list[Seen]) -> Seen:
    assert len(spans) == 1, spans
    return spans[0]


def server_spans(spans: list[Seen], client_spans: list[Seen]) -> list[Seen]:
    """The backend's spans answering these client spans."""
    ids = {span.span_id for span in client_spans}
    return [span for span in spans if span.parent_id in ids and span.name == "tools/call echo"]


def assert_items_nest(spans: list[Seen], shard_spans: list[Seen], batch_id: str, ids: set[str]) -> list[Seen]:
    """Every item's span is a child of a shard span, carries its facts, and has the SDK's client span as its child;
    the client spans."""
    items = [span for shard in shard_spans for span in children(spans, shard) if span.name.startswith("mcp_batch item")]
    assert {span.attributes["mcp_batch.item.id"] for span in items} == ids
    client_spans = []
    for item in items:
        assert item.attributes["mcp_batch.batch.id"] == batch_id
        assert item.attributes["mcp_batch.server"] == "traced"
        assert item.attributes["mcp_batch.tool"] == "echo"
        assert item.attributes["mcp_batch.item.status"] == "ok"
        assert item.attributes["mcp_batch.item.attempts"] == 1
        assert item.attributes["mcp_batch.item.rate_wait_seconds"] >= 0
        assert isinstance(item.attributes["mcp_batch.item.index"], int)
        sent = [span for span in children(spans, item) if span.name == "MCP send tools/call echo"]
        client_spans.append(one(sent))
    return client_spans


def ancestors(spans: list[Seen], span: Seen) -> list[Seen]:
    by_id = {s.span_id: s for s in spans if s.trace_id == span.trace_id}
    found = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        found.append(span)
    return found


async def test_one_trace_runs_from_the_submit_to_the_backends_server_span(
    settings: Settings, memory: InMemorySpanExporter, collector: Collector
) -> None:
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    traceparent = {"traceparent": f"00-{caller_trace}-{caller_span}-01"}  # the caller's own trace goes on
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url, timeout=90) as client:
        response = await client.post("/v1/batches", json={"calls": echoes(3)}, headers=traceparent)
        assert response.status_code == 202, response.text
        document = await finished(client, response.json()["id"])
    assert document["counts"]["succeeded"] == 3, document["counts"]
    spans = seen(memory.get_finished_spans())
    root = one(named(spans, "mcp_batch submit"))
    assert root.trace_id == caller_trace
    assert root.attributes["mcp_batch.batch.id"] == document["id"]
    assert root.attributes["mcp_batch.batch.calls"] == 3
    # Under FastAPI's own HTTP server span, which continued the caller's traceparent.
    request = ancestors(spans, root)[-1]
    assert request.name == "POST /v1/batches" and request.parent_id == caller_span
    shard_spans = named(spans, "mcp_batch shard")
    assert shard_spans and all(span.parent_id == root.span_id for span in shard_spans)
    assert all(span.trace_id == root.trace_id for span in spans if span.name.startswith("mcp_batch"))
    client_spans = assert_items_nest(spans, shard_spans, document["id"], {"e0", "e1", "e2"})
    # Across the process boundary: the backend's SDK took the context from the request's `_meta`.
    backend = collector.wait(lambda got: len(server_spans(got, client_spans)) == 3)
    answered = server_spans(backend, client_spans)
    assert {span.trace_id for span in answered} == {root.trace_id}
    assert {span.service for span in answered} == {"fault-backend"}


async def test_a_worker_process_joins_the_trace_of_the_batch_it_runs(
    settings: Settings, memory: InMemorySpanExporter, collector: Collector, tmp_path: Path
) -> None:
    with worker_processes(settings, 1, tmp_path, env=collector.env):
        async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=90) as client:
            document = await finished(client, (await submit(client, echoes(2)))["id"])
        assert document["counts"]["succeeded"] == 2, document["counts"]
        root = one(named(seen(memory.get_finished_spans()), "mcp_batch submit"))

        def whole(got: list[Seen]) -> bool:
            sent = named(got, "MCP send tools/call")
            items = named(got, "mcp_batch item")
            return len(items) == 2 and len(server_spans(got, sent)) == 2

        spans = collector.wait(whole)
    shard_spans = [span for span in named(spans, "mcp_batch shard") if span.parent_id == root.span_id]
    assert shard_spans and {span.service for span in shard_spans} == {"mcp-batch-worker"}
    assert {span.trace_id for span in shard_spans} == {root.trace_id}
    client_spans = assert_items_nest(spans, shard_spans, document["id"], {"e0", "e1"})
    assert {span.trace_id for span in server_spans(spans, client_spans)} == {root.trace_id}


def call(call_id: str, server: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "server": server, "tool": tool, "arguments": arguments}


CALLS = [
    call("ok", "traced", "echo", message=ARG_SECRET),
    call("tool_error", "traced", "fail", reason=ARG_SECRET),
    call("timeout", "traced", "sleep", seconds=5, tag=ARG_SECRET),
    call("stdio_ok", "traced_stdio", "echo", message=ARG_SECRET),
    call("stdio_error", "traced_stdio", "fail", reason=ARG_SECRET),
    call("unknown_tool", "traced", "no_such_tool", token=ARG_SECRET),
    call("schema", "traced", "echo", message={"nested": ARG_SECRET}, extra=ARG_SECRET),
    call("blocked", "traced", "write", key=ARG_SECRET),
    call("reference", "traced", "echo", message="@ok.no.such.path", token=ARG_SECRET),
]


MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def test_no_secret_and_no_argument_value_reaches_a_span(
    settings: Settings, memory: InMemorySpanExporter, collector: Collector
) -> None:
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url, timeout=90) as client:
        document = await finished(client, (await submit(client, CALLS))["id"])
        for bad in ({"calls": [{"server": "traced", "tool": "echo", "arguments": ARG_SECRET}]}, {"calls": ARG_SECRET}):
            assert (await client.post("/v1/batches", json=bad)).status_code == 422
        door = {"name": "call_tools_batch", "arguments": {"calls": CALLS[:2], "wait_seconds": 10}}
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": door}
        answer = await client.post("/mcp", json=message, headers=MCP_HEADERS)
        assert answer.status_code == 200, answer.text
    outcomes = {item["id"]: item["status"] for item in document["results"]}
    assert outcomes["ok"] == outcomes["stdio_ok"] == "ok"
    assert outcomes["timeout"] == "timeout" and outcomes["tool_error"] == outcomes["stdio_error"] == "error"
    mine = memory.get_finished_spans()
    items = named(seen(mine), "mcp_batch item")
    assert {span.attributes["mcp_batch.item.id"] for span in items} == {c["id"] for c in CALLS}
    failed = [span for span in items if span.attributes["mcp_batch.item.status"] != "ok"]
    assert all("error.type" in span.attributes for span in failed)
    # Both backends' server spans arrived (stdio too: the context travels in `_meta` whatever the transport).
    collector.wait(lambda got: {"fault-backend"} <= {s.service for s in got} and len(named(got, "tools/call")) >= 4)
    texts = [span.to_json() for span in mine] + [body.decode("utf-8", "replace") for body in collector.bodies]
    for text in texts:
        for secret in (HEADER_SECRET, ENV_SECRET, ARG_SECRET):
            assert secret not in text, f"{secret} in a span: {text[:3000]}"
    assert json.dumps(document).count(ARG_SECRET) > 0  # the echo's result does carry it: spans must not
