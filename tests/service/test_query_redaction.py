"""A token in a URL reaches no log line and no span: a JSON Lines upload's webhook URL travels in a header (the
client, the CLI), a query-string one is refused, and whatever a query string holds is logged and traced with its
values taken out. Searched in everything a real `mcp-batch api` process writes to its log and exports over OTLP,
and in this process's log records (uvicorn's access log, httpx's request lines) and spans."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from mcp_batch.client import AsyncClient, Client
from mcp_batch.settings import Settings
from tests.span_sink import Collector, in_memory
from tests.support import api_process, command_env, run_command, running_api

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

TOKEN = "hook-SEKRET-51c0e7"
HOOK = f"https://hooks.example.com/h?token={TOKEN}"
NDJSON = {"content-type": "application/x-ndjson"}
CALLS = b'{"server": "demo", "tool": "echo"}\n'


@pytest.fixture
def hooked(settings: Settings) -> Settings:
    update = {"webhook_allow": ["https://hooks.example.com/"], "webhook_secret": SecretStr("signing-key")}
    return settings.model_copy(update=update)


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector().running() as running:
        yield running


async def token_requests(http: httpx.AsyncClient) -> None:
    """Requests whose query strings carry the token: each is refused, and each is logged and traced."""
    refused = await http.post("/v1/batches", content=CALLS, headers=NDJSON, params={"webhook_url": HOOK})
    assert refused.status_code == 422 and "X-MCP-Batch-Webhook-URL" in refused.text
    assert (await http.get("/v1/batches", params={"token": TOKEN})).status_code == 422
    assert (await http.get("/healthz", params={"token": TOKEN})).status_code == 200


async def test_no_webhook_token_reaches_the_api_processs_log_or_its_spans(
    hooked: Settings, collector: Collector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in collector.env.items():
        monkeypatch.setenv(name, value)  # the API process exports its spans to the collector
    calls = tmp_path / "calls.jsonl"
    calls.write_bytes(CALLS)
    with api_process(hooked, tmp_path) as base_url:

        def upload() -> object:
            with Client(base_url) as client:
                return client.upload(CALLS, webhook_url=HOOK).webhook

        assert await asyncio.to_thread(upload) is not None
        async with AsyncClient(base_url) as client:
            assert (await client.upload(str(calls), webhook_url=HOOK)).webhook is not None
        code, _, err = await run_command(
            "submit", str(calls), "--webhook-url", HOOK, "--server-url", base_url, env=command_env()
        )
        assert code == 0, err
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            await token_requests(http)
        # the access log names each request, its query's values taken out
        collector.wait(lambda spans: sum(s.attributes.get("url.path") == "/healthz" for s in spans) >= 1)
    log = (tmp_path / "api.log").read_text()
    assert "POST /v1/batches?webhook_url=REDACTED HTTP/1.1" in log, log[-3000:]
    assert "GET /healthz?token=REDACTED HTTP/1.1" in log
    assert TOKEN not in log, [line for line in log.splitlines() if TOKEN in line]
    assert any(s.attributes.get("url.query") == "token=REDACTED" for s in collector.spans)
    for body in collector.bodies:
        assert TOKEN.encode() not in body


async def test_no_token_in_a_query_reaches_this_processs_log_records_or_spans(
    hooked: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    access = logging.getLogger("uvicorn.access")
    with in_memory() as memory:
        async with running_api(hooked) as base_url:
            access.addHandler(caplog.handler)  # uvicorn's own access logger does not propagate
            level = access.level
            access.setLevel(logging.INFO)
            caplog.set_level(logging.DEBUG)
            try:
                async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
                    await token_requests(http)
                async with AsyncClient(base_url) as client:
                    assert (await client.upload(CALLS, webhook_url=HOOK)).webhook is not None
            finally:
                access.removeHandler(caplog.handler)
                access.setLevel(level)
        spans = finished_spans(memory)
    lines = [record.getMessage() for record in caplog.records]
    assert any("GET /healthz?token=REDACTED" in line for line in lines), lines  # access lines were seen
    assert any("HTTP Request: GET" in line and "token=REDACTED" in line for line in lines)  # httpx's too
    assert [line for line in lines if TOKEN in line] == []
    assert any('"url.query": "webhook_url=REDACTED"' in span for span in spans)
    assert [span for span in spans if TOKEN in span] == []


def finished_spans(memory: InMemorySpanExporter) -> list[str]:
    return [json.dumps(json.loads(span.to_json())) for span in memory.get_finished_spans()]
