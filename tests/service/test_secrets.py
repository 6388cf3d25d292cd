"""Secrets never come back: backend credentials (headers and env from `${VAR}`, and tenants' own, set through the
credential routes) appear in no response, header, log line, document or Redis value, and argument values appear in no
error and no log line, whatever the outcome of the call.

Every output of a session that exercises each path (success, tool error, timeout, unknown tool and server, refused
credentials, a backend that cannot be started, schema and bound refusals, malformed batches at every door) is gathered
and searched for the distinctive values seeded here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from mcp_batch.credentials.sealing import new_key
from mcp_batch.settings import Settings
from tests.span_sink import in_memory
from tests.support import (
    HttpBackendProcess,
    ServiceHandle,
    command_env,
    eventually,
    finished,
    free_port,
    run_command,
    start_http_backend,
    stdio_demo,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

HEADER_SECRET = "sk-SEKRET-header-7f3a"
ENV_SECRET = "sk-SEKRET-env-41c9"
TENANT_SECRET = "tk-SEKRET-tenant-5b2e"  # a tenant's own, for an HTTP backend (the one it takes) and a stdio one
ARG_SECRET = "arg-SEKRET-9c1d"
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture(scope="module")
def vault() -> Iterator[HttpBackendProcess]:
    """A backend that takes exactly the secret header."""
    backend = start_http_backend(extra_args=["--require-token", HEADER_SECRET])
    yield backend
    backend.stop()


@pytest.fixture(scope="module")
def locked() -> Iterator[HttpBackendProcess]:
    """A backend that refuses the secret header (401)."""
    backend = start_http_backend(extra_args=["--require-token", "another-token"])
    yield backend
    backend.stop()


@pytest.fixture(scope="module")
def tenant_vault() -> Iterator[HttpBackendProcess]:
    """A backend that takes exactly the tenant's secret."""
    backend = start_http_backend(extra_args=["--require-token", TENANT_SECRET])
    yield backend
    backend.stop()


@pytest.fixture
def memory() -> Iterator[InMemorySpanExporter]:
    with in_memory() as exporter:
        yield exporter


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"secrets_keys": SecretStr(json.dumps([new_key()]))})


@pytest.fixture
def servers(
    servers: dict[str, Any],
    vault: HttpBackendProcess,
    locked: HttpBackendProcess,
    tenant_vault: HttpBackendProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    monkeypatch.setenv("MCPB_TEST_SECRET_HEADER", HEADER_SECRET)
    monkeypatch.setenv("MCPB_TEST_SECRET_ENV", ENV_SECRET)
    bearer = {"Authorization": "Bearer ${MCPB_TEST_SECRET_HEADER}", "X-Api-Key": "${MCPB_TEST_SECRET_HEADER}"}
    env = {"DEMO_TOKEN": "${MCPB_TEST_SECRET_ENV}"}
    return {
        "vault": {"url": vault.url, "headers": bearer, "timeout_seconds": 1},
        "locked": {"url": locked.url, "headers": bearer},
        "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp", "headers": bearer},
        "local": stdio_demo(env=env, timeout_seconds=1),
        "broken": {"command": "/nonexistent/mcp-server", "env": env},
        "tvault": {"url": tenant_vault.url, "auth": {"type": "tenant"}},
        "tlocked": {"url": locked.url, "auth": {"type": "tenant"}},
        "tlocal": stdio_demo(auth={"type": "tenant", "env": "DEMO_TENANT"}),
    }


def call(call_id: str, server: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "server": server, "tool": tool, "arguments": arguments}


CALLS = [
    call("ok", "vault", "echo", message=ARG_SECRET),
    call("tool_error", "vault", "fail", reason=ARG_SECRET),
    call("timeout", "vault", "sleep", seconds=5, tag=ARG_SECRET),
    call("stdio_ok", "local", "echo", message=ARG_SECRET),
    call("stdio_timeout", "local", "sleep", seconds=5, tag=ARG_SECRET),
    call("unknown_tool", "local", "no_such_tool", token=ARG_SECRET),
    call("unknown_server", "nowhere", "echo", token=ARG_SECRET),
    call("refused", "locked", "echo", message=ARG_SECRET),
    call("unreachable", "gone", "echo", message=ARG_SECRET),
    call("unstartable", "broken", "echo", message=ARG_SECRET),
    call("schema", "vault", "echo", message={"nested": ARG_SECRET}, extra=ARG_SECRET),
    call("bound", "vault", "echo", message=ARG_SECRET, deep=[[[[[[[[[ARG_SECRET]]]]]]]]]),
    call("blocked", "vault", "write", key=ARG_SECRET),
    call("reference", "vault", "echo", message="@ok.no.such.path", token=ARG_SECRET),
]


class Outputs:
    """Everything the service answered: each response's label, status, headers and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str, str]] = []

    def add(self, label: str, response: httpx.Response) -> httpx.Response:
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        self.seen.append((label, response.status_code, headers, response.text))
        return response

    async def get(self, client: httpx.AsyncClient, url: str, **kwargs: Any) -> httpx.Response:
        return self.add(f"GET {url}", await client.get(url, **kwargs))

    async def post(self, client: httpx.AsyncClient, url: str, **kwargs: Any) -> httpx.Response:
        return self.add(f"POST {url}", await client.post(url, **kwargs))


def json_values(body: str) -> list[Any]:
    """The JSON values of a body: a JSON document, JSON Lines, or server-sent events' data lines."""
    try:
        return [json.loads(body)]
    except ValueError:
        lines = [line.removeprefix("data: ") for line in body.splitlines() if line.strip()]
        return [json.loads(line) for line in lines if line.startswith(("{", "["))]


def mcp_call(tool: str, arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def errors_in(value: Any) -> Iterator[Any]:
    """Every `error` object anywhere in a JSON value (item errors, Gumloop errors), and every 4xx `detail`."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in ("error", "detail", "tools_error"):
                yield inner
            else:
                yield from errors_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from errors_in(inner)


async def test_no_secret_and_no_argument_value_leaks_into_any_output(
    service: ServiceHandle, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    out = Outputs()
    async with httpx.AsyncClient(base_url=service.base_url, timeout=90) as client:
        submitted = await out.post(client, "/v1/batches", json={"calls": CALLS}, headers={"Idempotency-Key": "k1"})
        assert submitted.status_code == 202, submitted.text
        batch_id = submitted.json()["id"]
        document = await finished(client, batch_id)
        out.seen.append(("document", 200, "", json.dumps(document)))
        outcomes = {item["id"]: (item["status"], (item.get("error") or {}).get("code")) for item in document["results"]}
        assert outcomes == {
            "ok": ("ok", None),
            "tool_error": ("error", "tool_error"),
            "timeout": ("timeout", "timeout"),
            "stdio_ok": ("ok", None),
            "stdio_timeout": ("timeout", "timeout"),
            "unknown_tool": ("unknown_tool", "unknown_tool"),
            "unknown_server": ("unknown_server", "unknown_server"),
            "refused": ("unauthenticated", "backend_unauthenticated"),
            "unreachable": ("error", "backend_unavailable"),
            "unstartable": ("error", "backend_unavailable"),
            "schema": ("invalid_call", "invalid_arguments"),
            "bound": ("invalid_call", "bound_exceeded"),
            "blocked": ("blocked", "not_read_only"),
            "reference": ("invalid_reference", "invalid_reference"),
        }
        for item in CALLS:
            await out.get(client, f"/v1/batches/{batch_id}/items/{item['id']}")
        await out.get(client, f"/v1/batches/{batch_id}/results")
        await out.post(client, f"/v1/batches/{batch_id}/retry")
        await out.post(client, f"/v1/batches/{batch_id}/cancel")
        await out.post(client, "/v1/batches:validate", json={"calls": CALLS})
        replay = {"calls": [call("other", "vault", "echo", message=ARG_SECRET + "2")]}
        assert (
            await out.post(client, "/v1/batches", json=replay, headers={"Idempotency-Key": "k1"})
        ).status_code == 409
        for bad in (
            {"calls": [{"server": "vault", "tool": "echo", "arguments": ARG_SECRET}]},
            {"calls": [{"server": "vault", "tool": "echo", "arguments": [ARG_SECRET]}]},
            {"calls": [call("x", "vault", "echo", message=ARG_SECRET)], "mode": ARG_SECRET},
            {"calls": [call("x", "vault", "echo", message=ARG_SECRET)], "read_only": ARG_SECRET},
            {"calls": [{"id": ARG_SECRET * 10, "server": "vault", "tool": "echo"}]},
            {"calls": [call("a\x00" + ARG_SECRET, "vault", "echo")]},
            {"calls": [call("big", "vault", "echo", message=ARG_SECRET + "x" * 30_000)]},
        ):
            assert (await out.post(client, "/v1/batches", json=bad)).status_code == 422
        gumloop = {
            "calls": [
                {"ref": "g1", "server_id": "locked", "tool_name": "echo", "arguments": {"message": ARG_SECRET}},
                {"ref": "g2", "server_id": "vault", "tool_name": "fail", "arguments": {"reason": ARG_SECRET}},
                {"ref": "g3", "server_id": "vault", "tool_name": "echo", "arguments": {"message": [ARG_SECRET]}},
            ]
        }
        await out.post(client, "/mcp/tools/call", json=gumloop)
        await out.post(client, "/mcp/tools/call", json={"calls": [{"server_id": ARG_SECRET, "x": ARG_SECRET}]})
        mcp_calls = [call("m1", "locked", "echo", message=ARG_SECRET), call("m2", "vault", "fail", reason=ARG_SECRET)]
        for tool, arguments in (
            ("call_tools_batch", {"calls": mcp_calls, "wait_seconds": 10}),
            ("call_tools_batch", {"calls": ARG_SECRET}),
            ("submit_batch", {"calls": [{"server": "vault", "tool": "echo", "arguments": ARG_SECRET}]}),
            ("get_batch", {"batch_id": ARG_SECRET}),
            ("list_servers", {}),
        ):
            await out.post(client, "/mcp", json=mcp_call(tool, arguments), headers=MCP_HEADERS)
        await out.get(client, "/v1/servers")
        await out.get(client, "/openapi.json")
        await out.get(client, "/healthz")
    logs = [(f"log {r.name}", f"{r.getMessage()}\n{r.exc_text or ''}") for r in caplog.records]
    assert logs

    for label, status, headers, body in out.seen:
        for secret in (HEADER_SECRET, ENV_SECRET):
            assert secret not in headers + body, f"{secret} in {label}: {body[:2000]}"
        if status >= 400:  # a refusal quotes no argument value (nor any submitted value)
            assert ARG_SECRET not in body, f"an argument value in {label} ({status}): {body[:2000]}"
        for value in json_values(body):
            for error in errors_in(value):
                assert ARG_SECRET not in json.dumps(error), f"an argument value in an error of {label}: {error}"
            result = value.get("result") or {} if isinstance(value, dict) else {}
            # A refusal of the door is a tool error without structured content; a batch document (isError once a
            # call failed) carries what the backends answered, as on REST, and its `error` objects are checked above.
            if result.get("isError") and result.get("structuredContent") is None:
                assert ARG_SECRET not in json.dumps(value), f"an argument value in a tool error of {label}: {value}"
    for label, text in logs:
        for secret in (HEADER_SECRET, ENV_SECRET, ARG_SECRET):
            assert secret not in text, f"{secret} in {label}: {text[:2000]}"
    # The caller's own argument does come back where a tool legitimately returned it: the checks above look at errors.
    assert ARG_SECRET in json.dumps(document["results"][0]["content"])


TENANT_CALLS = [
    call("t_ok", "tvault", "echo", message="hello"),
    call("t_stdio", "tlocal", "echo", message="hello"),
    call("t_refused", "tlocked", "echo", message="hello"),
]


async def test_no_tenant_credential_leaks_from_any_route_command_log_span_or_redis_key(
    memory: InMemorySpanExporter, service: ServiceHandle, redis: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    out = Outputs()
    async with httpx.AsyncClient(base_url=service.base_url, timeout=90) as client:

        async def put(server: str, body: dict[str, Any]) -> int:
            return out.add(f"PUT {server}", await client.put(f"/v1/credentials/{server}", json=body)).status_code

        for server in ("tvault", "tlocal", "tlocked"):
            assert await put(server, {"secret": TENANT_SECRET}) == 204
        assert await put("tvault", {"secret": TENANT_SECRET + "\n"}) == 422
        assert await put("tvault", {"secret": TENANT_SECRET, "extra": TENANT_SECRET}) == 422
        assert await put("tvault", {"secret": TENANT_SECRET * 2_000}) == 422
        assert await put("nowhere", {"secret": TENANT_SECRET}) == 404
        assert await put("vault", {"secret": TENANT_SECRET}) == 409
        await out.get(client, "/v1/credentials")
        submitted = await out.post(client, "/v1/batches", json={"calls": TENANT_CALLS})
        document = await finished(client, submitted.json()["id"])
        out.seen.append(("tenant document", 200, "", json.dumps(document)))
        outcomes = {item["id"]: item["status"] for item in document["results"]}
        assert outcomes == {"t_ok": "ok", "t_stdio": "ok", "t_refused": "unauthenticated"}
        await out.post(client, "/v1/batches:validate", json={"calls": TENANT_CALLS})
        gumloop = [{"server_id": c["server"], "tool_name": "echo", "arguments": c["arguments"]} for c in TENANT_CALLS]
        await out.post(client, "/mcp/tools/call", json={"calls": gumloop})
        batch = mcp_call("call_tools_batch", {"calls": TENANT_CALLS, "wait_seconds": 10})
        await out.post(client, "/mcp", json=batch, headers=MCP_HEADERS)
        await out.get(client, "/v1/servers")
        deleted = await client.delete("/v1/credentials/tvault")
        assert out.add("DELETE tvault", deleted).status_code == 204
        assert out.add("DELETE again", await client.delete("/v1/credentials/tvault")).status_code == 404

        async def refused_once_deleted() -> bool:
            after = await out.post(client, "/v1/batches", json={"calls": TENANT_CALLS[:1]})
            ended = await finished(client, after.json()["id"])
            out.seen.append(("document after delete", 200, "", json.dumps(ended)))
            return bool(ended["results"][0]["status"] == "unauthenticated")

        await eventually(refused_once_deleted, what="calls refused once the credential is deleted", timeout=20)
        await out.get(client, "/openapi.json")
    await the_credential_commands(service.base_url, out)
    for label, _, headers, body in out.seen:
        assert TENANT_SECRET not in headers + body, f"the tenant's secret in {label}: {body[:2000]}"
    for record in caplog.records:
        text = f"{record.getMessage()}\n{record.exc_text or ''}"
        assert TENANT_SECRET not in text, f"the tenant's secret in log {record.name}: {text[:2000]}"
    spans = [
        (f"span {span.name}", json.dumps({**dict(span.attributes or {}), "events": [e.name for e in span.events]}))
        for span in memory.get_finished_spans()
    ]
    assert spans
    for label, text in spans:
        assert TENANT_SECRET not in text, f"the tenant's secret in {label}: {text[:2000]}"
    stored = [key for key in await redis.keys("*")]
    assert any(b"credentials" in key for key in stored)
    for key in stored:
        assert TENANT_SECRET.encode() not in key + (await redis.dump(key) or b""), f"the tenant's secret in {key!r}"


async def the_credential_commands(base_url: str, out: Outputs) -> None:
    """`mcp-batch credentials set|list|delete` as a user runs them, the secret from stdin; their outputs to `out`."""
    env, url = command_env(), ["--server-url", base_url]
    verbs: list[tuple[tuple[str, ...], bytes | None]] = [
        (("set", "tvault"), f"{TENANT_SECRET}\n".encode()),
        (("list",), None),
        (("list", "--json"), None),
        (("set", "tvault"), f"{TENANT_SECRET}\nmore".encode()),  # refused: one line only
        (("delete", "tvault"), None),
        (("delete", "tvault"), None),
    ]
    for argv, stdin in verbs:
        code, said, err = await run_command("credentials", *argv, *url, env=env, stdin=stdin)
        out.seen.append((f"mcp-batch credentials {' '.join(argv)}", code, err, said))
    codes = [code for _, code, _, _ in out.seen[-len(verbs) :]]
    assert codes[:3] == [0, 0, 0] and codes[4] == 0 and codes[5] != 0, out.seen[-len(verbs) :]
