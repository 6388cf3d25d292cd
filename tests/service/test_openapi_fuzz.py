"""Schemathesis against the service's own OpenAPI document: the real API and worker (in a thread of their own, since
schemathesis calls them synchronously), positive and negative examples for every operation, a bounded and
deterministic number of them; no answer is a 5xx, and every answer's status, content type, headers and body are the
ones its operation declares."""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import CHECKS as ALL_CHECKS
from schemathesis.checks import not_a_server_error

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from service.app import create_app
from tests.conftest import REDIS_URL
from tests.support import eventually_blocking, running_service, stdio_demo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(170)]

KEY = "mcpb_fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}

EXAMPLES = 100  # per operation: about 1,400 requests over the fourteen, in under a minute on two slow cores


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """API and worker in a thread with its own event loop; long waits cut short so examples stay quick."""
    redis.Redis.from_url(REDIS_URL).flushdb()
    directory = tmp_path_factory.mktemp("fuzz")
    path, keys = directory / "servers.json", directory / "keys.json"
    path.write_text(json.dumps({"mcpServers": {"demo": stdio_demo(timeout_seconds=2)}}))
    keys.write_text(json.dumps({"keys": [{"sha256": hash_key(KEY), "tenant": "fuzz", "write": True}]}))
    service_settings = Settings(
        redis_url=REDIS_URL,
        servers=Path(path),
        keys=keys,
        worker_idle_poll_seconds=30,
        max_wait_seconds=0.2,  # `?wait=` up to 60 is still generated, and held this long
        sync_wait_seconds=5,  # POST /mcp/tools/call: a fuzzed wait is short; its 504 is a declared answer (WAITS)
        auth="keys",  # the document says every route but health needs a key: checked too (ignored_auth)
    )
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def serve() -> None:
        state["loop"], state["stop"] = asyncio.get_running_loop(), asyncio.Event()
        async with running_service(service_settings) as handle:
            state["url"] = handle.base_url
            ready.set()
            await state["stop"].wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="fuzzed-service")
    thread.start()
    try:
        assert ready.wait(60), "the service did not start"
        yield state["url"]
    finally:
        if "stop" in state:
            state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)


def own_document() -> dict[str, Any]:
    """The app's OpenAPI document as /openapi.json serves it (it does not depend on the backends)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "servers.json"
        path.write_text('{"mcpServers": {}}')
        return create_app(Settings(servers=path, auth="none")).openapi()


# Loaded at collection, not through schemathesis.pytest.from_fixture (its lazy loader fails under pytest 9).
DOCUMENT = own_document()
# A JSON Lines upload's body is text (each line a call): generated strings are sent as they are
schemathesis.serializer.alias(["application/x-ndjson", "application/jsonl"], "text/plain")


def fuzzed_document() -> dict[str, Any]:
    """The document less `webhook_url`: a URL is taken only under the deployment's allow-list, which no schema can
    state (and this service has none, so it refuses every one); and less the submit's JSON Lines form."""
    document = copy.deepcopy(DOCUMENT)
    for name in ("BatchRequest", "RetryRequest"):
        del document["components"]["schemas"][name]["properties"]["webhook_url"]
    # Nor the submit's query options: taken only with a JSON Lines body (a rule across query and content type)
    for path in ("/v1/batches", "/v1/batches:validate"):
        submit = document["paths"][path]["post"]
        submit["parameters"] = [  # and its webhook header: a URL under the allow-list, as above
            p for p in submit.get("parameters", []) if p["in"] != "query" and p["name"] != "X-MCP-Batch-Webhook-URL"
        ]
        content = submit["requestBody"]["content"]  # and its JSON Lines body: each line a call, no schema says so
        for media in [m for m in content if m != "application/json"]:
            del content[media]
    for operations in document["paths"].values():  # nor signed cursors: only the service's own verify
        for operation in operations.values():
            kept = [p for p in operation.get("parameters", []) if not (p["in"] == "query" and p["name"] == "cursor")]
            if "parameters" in operation:
                operation["parameters"] = kept
    return document


schema = schemathesis.openapi.from_dict(fuzzed_document())


# Operations whose document declares a 504: a synchronous wait that the calls outlived, answered with the batch's
# location (the calls go on). Fuzzed batches queue behind the fuzz's own slow ones, so any wait can be outlived.
WAITS = {
    (method.upper(), path)
    for path, operations in DOCUMENT["paths"].items()
    for method, operation in operations.items()
    if "504" in operation.get("responses", {})
}


@schemathesis.check
def not_a_server_error_but_a_declared_wait(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's own check, less the 504 an operation declares for a wait its calls outlived (the body says so:
    error code `timeout` and the batch's location; its schema is checked like every answer's)."""
    if response.status_code == 504 and (case.method.upper(), case.operation.path) in WAITS:
        body = response.json()
        assert body["error"]["code"] == "timeout" and body["location"] == f"/v1/batches/{body['batch_id']}"
        return None
    return not_a_server_error(ctx, response, case)


# Every check schemathesis has (schema-valid requests accepted among them), the server-error one as above
CHECKS = [check for check in ALL_CHECKS.get_all() if check is not not_a_server_error]


def distinct_ids(body: Any) -> bool:
    """Ids (refs at the Gumloop door) unique in the batch, ignoring case, a call without one counting as its index:
    a rule across items, which JSON Schema cannot state (the document's descriptions do)."""
    calls = body.get("calls") if isinstance(body, dict) else None
    if not isinstance(calls, list):
        return True
    ids = [
        str(
            c.get("id", c.get("ref")) if isinstance(c, dict) and c.get("id", c.get("ref")) is not None else n
        ).casefold()
        for n, c in enumerate(calls)
    ]
    return len(set(ids)) == len(ids)


@schema.hook
def filter_body(context: Any, body: Any) -> bool:
    return distinct_ids(body)


@schema.hook
def filter_headers(context: Any, headers: Any) -> bool:
    """No generated Host header: a host the service does not serve is refused (421) before any rule a schema states
    (the host guard has tests of its own)."""
    return not (isinstance(headers, dict) and any(str(name).lower() == "host" for name in headers))


@schema.auth()
class Key:
    """The key every generated request carries (schemathesis knows it for its auth checks, which drop or spoil it)."""

    def get(self, case: Any, ctx: Any) -> str:
        return KEY

    def set(self, case: Any, data: str, ctx: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


# Path parameters of real batches (filled by `known_batches`), so documents, items, cancels and retries are answered
# with 200s whose bodies are checked too, not only with 404s for ids nobody made.
KNOWN: list[dict[str, str]] = []


@schema.hook
def before_generate_path_parameters(context: Any, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    def known(params: dict[str, Any] | None) -> st.SearchStrategy[Any]:
        if not params or "batch_id" not in params:
            return st.just(params)
        return st.sampled_from(KNOWN).map(lambda ids: {**params, **{k: v for k, v in ids.items() if k in params}})

    return st.one_of(strategy, strategy.flatmap(known))


@pytest.fixture(scope="module")
def known_batches(base_url: str) -> None:
    """A finished batch (an ok item, a failed one, a large one), and one still running."""
    calls = [
        {"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": "hi"}},
        {"id": "b", "server": "demo", "tool": "fail"},
        {"id": "c", "server": "demo", "tool": "big", "arguments": {"size": 400_000}},
    ]
    with httpx.Client(base_url=base_url, timeout=60, headers=AUTH) as client:
        done = client.post("/v1/batches", json={"calls": calls}).json()["id"]
        sleeping = [{"id": "a", "server": "demo", "tool": "sleep", "arguments": {"seconds": 60}}]
        running = client.post("/v1/batches", json={"calls": sleeping}).json()["id"]

        def completed() -> bool:  # the service holds `wait` 0.2 s at most
            return bool(client.get(f"/v1/batches/{done}", params={"wait": 1}).json()["status"] == "completed")

        eventually_blocking(completed, what="the known batch completed", timeout=60)
    KNOWN[:] = [{"batch_id": done, "item_id": item} for item in "abc"] + [{"batch_id": running, "item_id": "a"}]


def test_the_fuzzed_document_is_the_one_the_service_serves(base_url: str) -> None:
    with httpx.Client(base_url=base_url) as client:
        assert client.get("/openapi.json").json() == DOCUMENT


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_answer_is_a_server_error_and_every_answer_matches_its_schema(
    case: Any, base_url: str, known_batches: None
) -> None:
    case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=30)
