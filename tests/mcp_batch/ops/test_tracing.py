"""Tracing is configured from the standard OTEL_* variables and is off, span-free, without them.

Each case that sets up the SDK runs in a fresh interpreter: OpenTelemetry sets a process's tracer provider once."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from opentelemetry import trace

from mcp_batch.ops.tracing import wanted
from tests import span_sink

SCRIPT = """
import json
from contextlib import nullcontext
from mcp_batch.ops import tracing
from mcp_batch.records import record
from mcp_batch.models import ItemStatus
from mcp_batch.store.claims import Claim

on = tracing.configure("probe")
claim = Claim(3, "c3", "demo", "echo", {"message": "hello"})
with tracing.submit_span(1):
    parent = tracing.traceparent()
with tracing.item_span("b1", claim) as span:
    tracing.item_finished(span, record(ItemStatus.ok, attempts=1, rate_wait_seconds=0.25))
print(json.dumps({"on": on, "null": isinstance(tracing.item_span("b1", claim), nullcontext), "parent": parent}))
tracing.flush()
"""


def probe(**env: str) -> tuple[dict[str, object], str]:
    """Run SCRIPT with only these OTEL_* variables; what it printed, and its stderr."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=clean | env, capture_output=True, text=True, timeout=60, check=True
    )
    printed: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return printed, done.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "console"}, True),
    ],
)
def test_traces_are_on_only_when_the_otel_variables_ask(env: dict[str, str], expected: bool) -> None:
    assert wanted(env) is expected


def test_without_the_variables_no_span_is_made_and_no_traceparent_is_stored() -> None:
    printed, stderr = probe()
    assert printed == {"on": False, "null": True, "parent": None}
    assert "mcp_batch" not in stderr


def test_disabled_sdk_makes_no_span_either() -> None:
    printed, _ = probe(OTEL_SDK_DISABLED="true", OTEL_TRACES_EXPORTER="console")
    assert printed == {"on": False, "null": True, "parent": None}


def test_the_console_exporter_writes_spans_with_the_items_facts_to_stderr() -> None:
    printed, stderr = probe(OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="probe-service")
    assert printed["on"] is True and printed["null"] is False
    assert isinstance(printed["parent"], str) and printed["parent"].startswith("00-")
    decoder, spans, at = json.JSONDecoder(), [], stderr.find("{")
    while at != -1:
        span, end = decoder.raw_decode(stderr, at)
        spans.append(span)
        at = stderr.find("{", end)
    item = next(s for s in spans if s["name"] == "mcp_batch item echo")
    assert item["resource"]["attributes"]["service.name"] == "probe-service"
    assert item["attributes"] == {
        "mcp_batch.batch.id": "b1",
        "mcp_batch.item.id": "c3",
        "mcp_batch.item.index": 3,
        "mcp_batch.server": "demo",
        "mcp_batch.tool": "echo",
        "mcp_batch.item.status": "ok",
        "mcp_batch.item.attempts": 1,
        "mcp_batch.item.rate_wait_seconds": 0.25,
    }
    assert "hello" not in stderr  # the argument value


def test_spans_draw_their_ids_without_moving_the_random_modules_state() -> None:
    # A property test's engine takes a change of the global state during a draw for a fault of its strategy.
    with span_sink.in_memory() as exporter:
        before = random.getstate()
        with trace.get_tracer_provider().get_tracer("test").start_as_current_span("a span"):
            pass
        assert random.getstate() == before
        assert [span.name for span in exporter.get_finished_spans()] == ["a span"]
