"""A retry keeps each of the batch's settings (the deadline as a duration from the retry's own submit), its body may
replace any of them, checked as a submit's, and its document says which batch each setting came from. Through the
real API and worker, and a real webhook receiver."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from mcp_batch import shards
from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from mcp_batch.retry_request import SETTINGS, RetryRequest
from mcp_batch.settings import Settings
from mcp_batch.store import Store
from mcp_batch.store.placement import new_batch_id
from service.application.retry import retry_request
from tests.mcp_batch.store.stored import advance
from tests.support import finished, run_batch, running_service
from tests.webhook_receiver import Receiver, webhook_receiver  # noqa: F401 - the `receiver` fixture

pytestmark = pytest.mark.timeout(90)

TOKEN = "t0ken-in-the-hook"
FAIL = {"id": "f", "server": "demo_http", "tool": "fail"}


@pytest.fixture
def settings(settings: Settings, receiver: Receiver) -> Settings:
    update = {
        "webhook_allow": [receiver.url("/hooks/")],
        "webhook_secret": SecretStr("webhook-secret-for-tests"),
        "webhook_allow_private": True,
    }
    return settings.model_copy(update=update)


async def retry(client: httpx.AsyncClient, batch_id: str, body: dict[str, Any] | None = None) -> httpx.Response:
    path = f"/v1/batches/{batch_id}/retry"
    return await (client.post(path) if body is None else client.post(path, json=body))


async def retried(client: httpx.AsyncClient, batch_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    answer = await retry(client, batch_id, body)
    assert answer.status_code == 202, answer.text
    return await finished(client, answer.json()["id"])


def seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


async def test_a_retry_keeps_each_setting_and_says_which_batch_it_came_from(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    hook = receiver.url(f"/hooks/done?token={TOKEN}")
    options = {
        "mode": "serial",
        "on_error": "stop",
        "max_concurrency": 3,
        "read_only": False,
        "response_max_bytes": 50_000,
        "deadline_seconds": 30.0,
        "retention_seconds": 600,
        "webhook_url": hook,
    }
    original = await run_batch(client, [FAIL, {"id": "e", "server": "demo_http", "tool": "echo"}], **options)
    assert original["settings_from"] is None  # not a retry: its settings are its own
    rerun = await retried(client, original["id"])
    kept = ("mode", "on_error", "max_concurrency", "read_only", "response_max_bytes", "retention_seconds")
    assert {name: rerun[name] for name in kept} == {name: options[name] for name in kept}
    assert seconds_between(rerun["created_at"], rerun["deadline_at"]) == pytest.approx(30, abs=0.01)
    assert rerun["settings_from"] == dict.fromkeys(SETTINGS, original["id"])
    requests = await receiver.received(2)  # the original's webhook, then the retry's, to the same URL
    assert [r.path for r in requests] == [f"/hooks/done?token={TOKEN}"] * 2
    assert {r.headers["X-MCP-Batch-Id"] for r in requests} == {original["id"], rerun["id"]}
    assert TOKEN not in (await client.get(f"/v1/batches/{rerun['id']}")).text


async def test_a_retry_body_replaces_the_settings_it_names_and_the_rest_are_kept(client: httpx.AsyncClient) -> None:
    original = await run_batch(client, [FAIL], mode="serial", deadline_seconds=60.0, retention_seconds=600)
    body = {"mode": "concurrent", "deadline_seconds": None, "retention_seconds": 120, "max_concurrency": None}
    rerun = await retried(client, original["id"], body)
    assert (rerun["mode"], rerun["deadline_at"], rerun["retention_seconds"]) == ("concurrent", None, 120)
    assert rerun["max_concurrency"] == 16  # null: what a submit without it gets
    assert rerun["settings_from"] == {name: rerun["id"] if name in body else original["id"] for name in SETTINGS}


async def test_a_retry_of_a_retry_names_the_batch_each_setting_was_first_set_in(client: httpx.AsyncClient) -> None:
    first = await run_batch(client, [FAIL], mode="serial")
    second = await retried(client, first["id"], {"retention_seconds": 300})
    third = await retried(client, second["id"])
    assert (third["mode"], third["retention_seconds"], third["retry_of"]) == ("serial", 300, second["id"])
    origins = third["settings_from"]
    assert origins["mode"] == first["id"] and origins["retention_seconds"] == second["id"]


async def test_a_retry_body_can_give_every_retried_call_a_longer_timeout(client: httpx.AsyncClient) -> None:
    slow = {"id": "slow", "server": "demo_http", "tool": "sleep", "arguments": {"seconds": 1}, "timeout_seconds": 0.3}
    original = await run_batch(client, [slow])
    assert original["results"][0]["status"] == "timeout"
    rerun = await retried(client, original["id"], {"timeout_seconds": 10.0})
    assert rerun["results"][0]["status"] == "ok" and rerun["settings_from"]["timeout_seconds"] == rerun["id"]


async def test_a_retry_body_is_checked_as_a_submit_and_never_echoes_a_webhook_url(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    original = await run_batch(client, [FAIL])
    refused = {
        "max_concurrency": 100_000,
        "read_only": None,
        "calls": [],
        "webhook_url": f"https://elsewhere.example/h?token={TOKEN}",
    }
    for name, value in refused.items():
        with caplog.at_level(logging.DEBUG):
            answer = await retry(client, original["id"], {name: value})
        assert answer.status_code == 422, (name, answer.text)
        assert [problem["loc"] for problem in answer.json()["detail"]] == [["body", name]]
    assert TOKEN not in answer.text and TOKEN not in caplog.text
    listed = (await client.get("/v1/batches")).json()["batches"]
    assert [batch["id"] for batch in listed] == [original["id"]]  # nothing was stored


async def test_a_kept_setting_the_service_no_longer_takes_names_the_batch_it_came_from_not_its_value(
    settings: Settings, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        hook = receiver.url(f"/hooks/?token={TOKEN}")
        original = await run_batch(client, [FAIL], retention_seconds=3_600, webhook_url=hook)
    stricter = {"retention_ceiling_seconds": 600, "webhook_allow": ["https://hooks.example.com/"]}
    async with (
        running_service(settings.model_copy(update=stricter)) as service,
        httpx.AsyncClient(base_url=service.base_url) as client,
    ):
        with caplog.at_level(logging.DEBUG):
            answer = await retry(client, original["id"])
        assert answer.status_code == 422, answer.text
        problems = {tuple(p["loc"]): p["msg"] for p in answer.json()["detail"]}
        assert set(problems) == {("body", "retention_seconds"), ("body", "webhook_url")}
        assert all(f"kept from batch {original['id']}" in msg for msg in problems.values())
        assert TOKEN not in answer.text and TOKEN not in caplog.text
        fixed = await retry(client, original["id"], {"retention_seconds": 600, "webhook_url": None})
        assert fixed.status_code == 202 and fixed.json()["webhook"] is None


async def test_an_idempotency_key_binds_a_retry_to_its_body(client: httpx.AsyncClient) -> None:
    original = await run_batch(client, [FAIL])
    path, key = f"/v1/batches/{original['id']}/retry", {"Idempotency-Key": "retry-with-a-body"}
    first = await client.post(path, json={"retention_seconds": 300}, headers=key)
    again = await client.post(path, json={"retention_seconds": 300}, headers=key)
    other = await client.post(path, json={"retention_seconds": 400}, headers=key)
    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 409)
    assert again.json()["id"] == first.json()["id"]


# A value other than the default for each setting of a submit. A setting added to `BatchRequest` fails the first test
# below until it has one here; then the second fails until a retry keeps it.
EVERY_SETTING: dict[str, Any] = {
    "mode": "serial",
    "on_error": "stop",
    "max_concurrency": 5,
    "read_only": False,
    "priority": "high",
    "response_max_bytes": 4_096,
    "deadline_seconds": 12.5,
    "retention_seconds": 77,
    "webhook_url": "https://hooks.example.com/h?token=x",
    "metadata": {"job": "nightly"},
    "questions": {"policy": "ask", "wait_seconds": 9.5},
}


def test_every_setting_of_a_submit_has_a_value_in_the_retry_test_and_a_place_in_a_retry_body() -> None:
    assert set(EVERY_SETTING) == set(BatchRequest.model_fields) - {"calls"}
    assert set(RetryRequest.model_fields) == set(SETTINGS) == set(EVERY_SETTING) | {"timeout_seconds"}
    fields = BatchRequest.model_fields
    assert all(fields[name].get_default(call_default_factory=True) != value for name, value in EVERY_SETTING.items())


async def test_a_retry_keeps_every_setting_of_a_submit(redis: aioredis.Redis) -> None:
    store = Store(redis, Keys(), 3600)
    batch_id = new_batch_id()
    job = shards.job_id(batch_id, 0)
    request = BatchRequest.model_validate({"calls": [{"server": "s", "tool": "t"}], **EVERY_SETTING})
    await store.submits.create(request, EVERY_SETTING["max_concurrency"], batch_id=batch_id, jobs=[job])
    claim = await advance(store, batch_id, job, None, want_next=True)
    assert claim is not None
    await advance(store, batch_id, job, (claim, {"status": "error"}), want_next=False)
    planned = (await retry_request(store, batch_id)).request
    assert planned.model_dump(exclude={"calls"}) == request.model_dump(exclude={"calls"})
