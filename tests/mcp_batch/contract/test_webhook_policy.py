"""Webhook policy as pure functions (the allow-list, the signature), and the delivery queue's claim on real Redis."""

from __future__ import annotations

import asyncio
import hashlib
import hmac

import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError

from mcp_batch.contract.webhook_policy import NOT_CONFIGURED, WebhookPolicy, signature
from mcp_batch.keys import Keys
from mcp_batch.models import WebhookStatus
from mcp_batch.settings import Settings
from mcp_batch.store.webhook_queue import WebhookQueue
from tests.support import eventually

POLICY = WebhookPolicy.build(["https://hooks.example.com/", "https://api.example.org:8443/hooks"], "secret")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/",
        "https://hooks.example.com/anything/at/all?token=x#f",
        "https://HOOKS.example.com:443/a",
        "https://api.example.org:8443/hooks",
        "https://api.example.org:8443/hooks/",
        "https://api.example.org:8443/hooks/batch-done",
    ],
)
def test_urls_under_an_entry_are_allowed(url: str) -> None:
    assert POLICY.refusal(url) is None


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com.evil.io/",
        "https://hooks.example.com@evil.io/",
        "https://user:pw@hooks.example.com/",
        "https://evil.io/https://hooks.example.com/",
        "https://evil.io/?u=https://hooks.example.com/",
        "https://xhooks.example.com/",
        "https://hooks.example.co/",
        "https://hooks.example.com:8443/",
        "http://hooks.example.com/",
        "ftp://hooks.example.com/",
        "//hooks.example.com/",
        "hooks.example.com/",
        "https://api.example.org:8443/hooksevil",
        "https://api.example.org:8443/other",
        "https://api.example.org/hooks/",
        "https://api.example.org:8443/hooks/../admin",
        "https://api.example.org:8443/hooks/%2e%2e/admin",
        "https://hooks.example.com\\@evil.io/",
        "https://hooks.example.com/ x",
        "https://hooks.example.com/\n",
        "https://hooks.exämple.com/",
        "https://hooks.example.com:99999/",
        "https:///path",
        "https://hooks.example.com/" + "a" * 2_000,
    ],
)
def test_lookalikes_and_malformed_urls_are_refused_without_being_echoed(url: str) -> None:
    refusal = POLICY.refusal(url)
    assert refusal is not None
    assert "example" not in refusal and "evil" not in refusal


def test_plain_http_passes_only_under_an_http_entry() -> None:
    assert POLICY.refusal("http://hooks.example.com/") == "must be an https:// URL"
    policy = WebhookPolicy.build(["http://127.0.0.1:8080/hooks/"], "secret")
    assert policy.refusal("http://127.0.0.1:8080/hooks/x") is None
    assert policy.refusal("https://127.0.0.1:8080/hooks/x") is not None


def test_without_a_secret_or_an_allow_list_webhooks_are_not_configured() -> None:
    assert WebhookPolicy.build(["https://hooks.example.com/"], None).refusal("https://hooks.example.com/") == (
        NOT_CONFIGURED
    )
    assert WebhookPolicy.build([], "secret").refusal("https://hooks.example.com/") == NOT_CONFIGURED


@pytest.mark.parametrize("entry", ["hooks.example.com", "https://hooks.example.com/?x=1", "ftp://h/", "https://u@h/"])
def test_a_bad_allow_list_entry_stops_start_up(entry: str) -> None:
    with pytest.raises(ValidationError, match="webhook_allow"):
        Settings(webhook_allow=[entry])


def test_the_signature_is_the_hmac_sha256_of_the_exact_body() -> None:
    body = b'{"id":"b1","status":"completed"}'
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert signature("s3cret", body) == f"sha256={expected}"


async def test_one_claim_wins_each_attempt_and_a_stale_attempt_cannot_settle(redis: aioredis.Redis) -> None:
    keys = Keys()
    await redis.hset(keys.batch("b1"), mapping={"status": "completed", "webhook_url": "https://h/"})
    await redis.zadd(keys.webhooks, {"b1": 0})
    queues = [WebhookQueue(redis, keys, lease_seconds=0.2) for _ in range(4)]
    assert (await queues[0].due(10))[0] == ["b1"]
    claims = await asyncio.gather(*(queue.claim("b1") for queue in queues))
    won = [claim for claim in claims if claim is not None]
    assert len(won) == 1 and won[0].number == 1 and won[0].url == "https://h/"
    assert (await queues[0].due(10))[0] == []  # leased to the winner
    again = await eventually(lambda: queues[1].claim("b1"), what="the lease lapsed on Redis's clock", timeout=5)
    assert again.number == 2
    assert not await queues[0].settle(won[0], WebhookStatus.delivered)  # the first attempt's lease had lapsed
    assert await queues[1].settle(again, WebhookStatus.delivered)
    assert await redis.zcard(keys.webhooks) == 0
    assert await redis.hget(keys.batch("b1"), "webhook_status") == b"delivered"


async def test_a_webhook_of_a_batch_that_is_gone_is_dropped(redis: aioredis.Redis) -> None:
    keys = Keys()
    await redis.zadd(keys.webhooks, {"gone": 0})
    assert await WebhookQueue(redis, keys, 10).claim("gone") is None
    assert await redis.zcard(keys.webhooks) == 0
