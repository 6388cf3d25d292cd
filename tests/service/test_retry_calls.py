"""A retry's calls are the original's, every per-call field of them: a call the original refused unsent, for a reason
that still holds, is refused again and never reaches its backend. Through the real API, worker and a backend of the
test's own, whose tallies count every invocation."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch import shards
from mcp_batch.contract.item_cursors import CursorKey, Position
from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest, Call
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from service.application.retry import retry_request
from tests.mcp_batch.store.stored import advance
from tests.support import (
    HttpBackendProcess,
    call_backend,
    counted_servers,  # noqa: F401 - the `servers` fixture of this module
    finished,
    run_batch,
)

pytestmark = pytest.mark.timeout(90)


async def retried(client: httpx.AsyncClient, batch_id: str) -> dict[str, Any]:
    """The retry's final document."""
    answer = await client.post(f"/v1/batches/{batch_id}/retry")
    assert answer.status_code == 202, answer.text
    return await finished(client, answer.json()["id"])


async def stored_calls(redis: aioredis.Redis, batch_id: str) -> list[dict[str, Any]]:
    return [json.loads(spec) for spec in await redis.lrange(Keys().calls(batch_id), 0, -1)]


async def tallies(backend: HttpBackendProcess) -> dict[str, int]:
    counted: dict[str, int] = (await call_backend(backend.url, "stats"))["tallies"]
    return counted


async def test_a_write_with_a_cursor_that_does_not_verify_is_refused_again_on_retry_and_never_runs(
    client: httpx.AsyncClient, redis: aioredis.Redis, fresh_backend: HttpBackendProcess
) -> None:
    unsigned = CursorKey(b"not this service's key").issue("default", Position(new_batch_id(), 0))
    write = {"id": "w", "server": "counted", "tool": "tally_write", "arguments": {"key": "w"}, "cursor": unsigned}
    original = await run_batch(client, [write], read_only=False)
    assert (original["results"][0]["status"], original["results"][0]["attempts"]) == ("invalid_cursor", 0)
    rerun = await retried(client, original["id"])
    assert "w" not in await tallies(fresh_backend)  # neither batch called the backend
    item = rerun["results"][0]
    assert (item["status"], item["attempts"], item["error"]["code"]) == ("invalid_cursor", 0, "invalid_cursor")
    assert (await stored_calls(redis, rerun["id"])) == [write]


async def test_a_write_blocked_in_a_read_only_batch_is_blocked_again_on_retry(
    client: httpx.AsyncClient, fresh_backend: HttpBackendProcess
) -> None:
    write = {"id": "w", "server": "counted", "tool": "tally_write", "arguments": {"key": "blocked"}}
    original = await run_batch(client, [write])
    assert original["results"][0]["status"] == "blocked"
    rerun = await retried(client, original["id"])
    assert rerun["read_only"] is True and rerun["results"][0]["status"] == "blocked"
    assert "blocked" not in await tallies(fresh_backend)


async def test_a_call_to_a_tool_the_backend_does_not_have_is_refused_again_on_retry(
    client: httpx.AsyncClient,
) -> None:
    original = await run_batch(client, [{"id": "u", "server": "counted", "tool": "no_such_tool"}])
    assert original["results"][0]["status"] == "unknown_tool"
    assert (await retried(client, original["id"]))["results"][0]["status"] == "unknown_tool"


async def test_a_call_that_timed_out_keeps_its_timeout_on_retry(client: httpx.AsyncClient) -> None:
    slow = {"id": "slow", "server": "counted", "tool": "tally", "arguments": {"key": "t", "seconds": 3}}
    original = await run_batch(client, [{**slow, "timeout_seconds": 0.5}])
    assert original["results"][0]["status"] == "timeout"
    item = (await retried(client, original["id"]))["results"][0]
    assert item["status"] == "timeout" and item["error"]["details"]["timeout_seconds"] == 0.5


# A value other than the default for each field of a call. A field added to `Call` fails the first test below until
# it has one here; then the second shows it survives being stored and retried.
EVERY_FIELD: dict[str, Any] = {
    "id": "every-field",
    "server": "counted",
    "tool": "tally",
    "arguments": {"key": "k", "nested": [1, {"x": None}]},
    "timeout_seconds": 2.5,
    "cursor": "c" * 40,
}


def test_every_field_of_a_call_has_a_value_in_the_retry_test() -> None:
    assert set(EVERY_FIELD) == set(Call.model_fields)
    fields = Call.model_fields
    assert all(fields[name].get_default(call_default_factory=True) != value for name, value in EVERY_FIELD.items())


async def test_a_retry_carries_every_field_of_a_call(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = new_batch_id()
    job = shards.job_id(batch_id, 0)
    call = Call.model_validate(EVERY_FIELD)
    await store.submits.create(BatchRequest(calls=[call]), 1, batch_id=batch_id, jobs=[job])
    claim = await advance(store, batch_id, job, None, want_next=True)
    assert claim is not None
    await advance(store, batch_id, job, (claim, {"status": "error"}), want_next=False)
    request = (await retry_request(store, batch_id)).request
    assert request.calls == [call]
