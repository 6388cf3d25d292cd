"""Completion webhooks through the real API and workers, to a real HTTP receiver: signed once, retried with backoff,
given up, refused at submit (allow-list) and at delivery (a private address), and sent once with two workers."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from mcp_batch.settings import Settings
from tests.support import (
    eventually,
    finished,
    live_workers,
    run_batch,
    running_api,
    running_service,
    submit,
    worker_processes,
)
from tests.webhook_receiver import Received, Receiver, webhook_receiver  # noqa: F401 - the `receiver` fixture

pytestmark = pytest.mark.timeout(90)

SECRET = "s3cret-for-tests"
SUMMARY_FIELDS = {"id", "status", "ok", "counts", "failed_ids", "created_at", "finished_at", "retry_of", "metadata"}


@pytest.fixture
def settings(settings: Settings, receiver: Receiver) -> Settings:
    """Webhooks allowed to the receiver (on loopback: allow_private), signed, with a short backoff."""
    update = {
        "webhook_allow": [receiver.url("/hooks/"), "https://hooks.example.com/"],
        "webhook_secret": SecretStr(SECRET),
        "webhook_allow_private": True,
        "webhook_backoff_base_seconds": 0.05,
    }
    return settings.model_copy(update=update)


async def webhook_state(client: httpx.AsyncClient, batch_id: str, status: str) -> dict[str, Any]:
    """Wait until the document shows the webhook `status`; the document's `webhook`."""

    async def settled() -> dict[str, Any] | None:
        webhook: dict[str, Any] = (await client.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()["webhook"]
        return webhook if webhook["status"] == status else None

    # the worker settles the attempt just after the receiver answers
    return await eventually(settled, what=f"the webhook {status}")


def signed(request: Received) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request.headers["X-MCP-Batch-Signature"], expected)


async def test_a_webhook_is_delivered_once_signed_with_the_summary(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    calls = [{"id": "good", "server": "demo", "tool": "echo"}, {"id": "bad", "server": "demo", "tool": "fail"}]
    url = receiver.url("/hooks/done?token=t0ps3cret")
    submitted = await submit(client, calls, webhook_url=url, metadata={"job": "nightly"})
    assert submitted["webhook"] == {"status": "pending", "attempts": 0}
    document = await finished(client, submitted["id"])
    [request] = await receiver.received(1)
    assert request.path == "/hooks/done?token=t0ps3cret"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-MCP-Batch-Id"] == document["id"]
    assert abs(int(request.headers["X-MCP-Batch-Timestamp"]) - time.time()) < 60
    assert request.headers["Host"] == url.split("/")[2]
    assert signed(request)
    body = json.loads(request.body)
    assert set(body) == SUMMARY_FIELDS
    assert body["id"] == document["id"] and body["status"] == "completed" and body["ok"] is False
    assert body["counts"] == document["counts"] and body["failed_ids"] == ["bad"]
    assert body["finished_at"] == document["finished_at"] and body["retry_of"] is None
    assert body["metadata"] == {"job": "nightly"}
    assert await webhook_state(client, document["id"], "delivered") == {"status": "delivered", "attempts": 1}
    response = await client.get(f"/v1/batches/{document['id']}")
    assert "t0ps3cret" not in response.text and "/hooks/" not in response.text
    assert len(receiver.requests) == 1


async def test_a_failing_receiver_is_retried_with_backoff_until_it_answers_2xx(
    client: httpx.AsyncClient, receiver: Receiver
) -> None:
    receiver.statuses = [500, 500]
    document = await run_batch(client, [{"server": "demo", "tool": "echo"}], webhook_url=receiver.url("/hooks/"))
    requests = await receiver.received(3)
    assert [r.answered for r in requests] == [500, 500, 200]
    assert len({r.body for r in requests}) == 1 and all(signed(r) for r in requests)
    assert await webhook_state(client, document["id"], "delivered") == {"status": "delivered", "attempts": 3}


async def test_a_webhook_is_given_up_after_the_last_attempt_and_logged_without_its_url(
    settings: Settings, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [503] * 10
    settings = settings.model_copy(update={"webhook_max_attempts": 2})
    with caplog.at_level(logging.INFO, logger="worker.delivery"):
        async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
            url = receiver.url("/hooks/x?token=t0ps3cret")
            document = await run_batch(client, [{"server": "demo", "tool": "echo"}], webhook_url=url)
            assert await webhook_state(client, document["id"], "failed") == {"status": "failed", "attempts": 2}
    assert len(receiver.requests) == 2
    [given_up] = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "worker.delivery"]
    assert document["id"] in given_up.getMessage() and "HTTP 503" in given_up.getMessage()
    assert "t0ps3cret" not in caplog.text and "/hooks/" not in caplog.text and "127.0.0.1" not in caplog.text


async def test_a_url_outside_the_allow_list_is_refused_at_submit_without_echoing_it(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    url = "https://elsewhere.example.net/hooks/?token=t0ps3cret"
    response = await client.post(
        "/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}], "webhook_url": url}
    )
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "webhook_url"] and problem["type"] == "webhook_refused"
    assert "t0ps3cret" not in response.text and "elsewhere" not in response.text
    assert await redis.keys("mcpb:batch:*") == []  # nothing stored


async def test_lookalike_hosts_are_refused(client: httpx.AsyncClient, receiver: Receiver) -> None:
    port = receiver.server.server_address[1]
    lookalikes = [
        "https://hooks.example.com.evil.io/",
        "https://hooks.example.com@evil.io/",
        "https://evil.io/?https://hooks.example.com/",
        "https://hooks.example.com:8443/",
        "http://hooks.example.com/",
        "https://xhooks.example.com/",
        f"http://127.0.0.1:{port}/hooksevil",
        f"http://127.0.0.1:{port}/hooks/../admin",
        f"http://localhost:{port}/hooks/",
        f"http://127.0.0.1:{port + 1}/hooks/",
        "https://hooks.example.com/" + "a" * 2_000,
    ]
    for url in lookalikes:
        response = await client.post(
            "/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}], "webhook_url": url}
        )
        assert response.status_code == 422, url
        assert [p["loc"] for p in response.json()["detail"]] == [["body", "webhook_url"]], url
        assert "evil" not in response.text and "hooks" not in response.text, url
    assert receiver.requests == []


async def test_without_a_secret_webhooks_are_not_configured(settings: Settings) -> None:
    settings = settings.model_copy(update={"webhook_secret": None})
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        body = {"calls": [{"server": "demo", "tool": "echo"}], "webhook_url": "https://hooks.example.com/"}
        response = await client.post("/v1/batches", json=body)
    assert response.status_code == 422
    assert response.json()["detail"] == [
        {"loc": ["body", "webhook_url"], "msg": "webhooks are not configured", "type": "webhook_refused"}
    ]


async def test_a_host_resolving_to_a_private_address_is_refused_at_delivery(
    settings: Settings, receiver: Receiver
) -> None:
    settings = settings.model_copy(update={"webhook_allow_private": False, "webhook_max_attempts": 1})
    async with running_service(settings) as service, httpx.AsyncClient(base_url=service.base_url) as client:
        document = await run_batch(client, [{"server": "demo", "tool": "echo"}], webhook_url=receiver.url("/hooks/"))
        assert await webhook_state(client, document["id"], "failed") == {"status": "failed", "attempts": 1}
    assert receiver.requests == []


@pytest.mark.slow
async def test_each_webhook_is_sent_once_with_two_workers(
    settings: Settings, receiver: Receiver, redis: aioredis.Redis, tmp_path: Path
) -> None:
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=90) as client:
        with worker_processes(settings, 2, tmp_path):
            await live_workers(redis, 2)
            url = receiver.url("/hooks/")
            batches = [
                (await submit(client, [{"server": "demo_http", "tool": "echo"}], webhook_url=url))["id"]
                for _ in range(6)
            ]
            requests = await receiver.received(len(batches))
            states = [await webhook_state(client, batch_id, "delivered") for batch_id in batches]
    assert sorted(r.headers["X-MCP-Batch-Id"] for r in requests) == sorted(batches)
    assert len(receiver.requests) == len(batches)  # one successful POST per batch, nothing more
    assert states == [{"status": "delivered", "attempts": 1}] * len(batches)


async def test_a_webhook_goes_as_its_batch_ends_not_at_the_next_sweep(settings: Settings, receiver: Receiver) -> None:
    slow = settings.model_copy(update={"sweep_seconds": 60.0})  # only the end's message can wake the sender in time
    async with running_service(slow) as service, httpx.AsyncClient(base_url=service.base_url, timeout=30) as client:
        document = await run_batch(client, [{"server": "demo", "tool": "echo"}], webhook_url=receiver.url("/hooks/"))
        [request] = await receiver.received(1, timeout=10)
    assert request.headers["X-MCP-Batch-Id"] == document["id"]
