"""Sentinel URLs, and a Sentinel failover under a batch of writes: a primary, a replica and three sentinels (real
processes on loopback, tests/sentinel_set.py) on Redis 7.0 and Valkey 8.1. The primary is killed with SIGKILL
mid-batch; the batch completes, no write reaches the counting backend twice, and the API answers nothing but 503
while no primary is known."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from redis.asyncio.sentinel import MasterNotFoundError

from mcp_batch.errors import ConfigError
from mcp_batch.keys import Keys
from mcp_batch.models import TERMINAL_ITEM
from mcp_batch.settings import Settings
from mcp_batch.store import connection, sentinel
from mcp_batch.store.sentinel import SentinelUrl
from tests.sentinel_set import SERVICE, SentinelSet, ended_through_the_failover, started_sentinels  # noqa: F401 - the `sentinels` fixture
from tests.support import (
    HttpBackendProcess,
    all_results,
    call_backend,
    counted_servers,  # noqa: F401 - the `servers` fixture of this module
    running_api,
    running_worker,
    submit,
    until_at_backend,
)


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    found = sentinel.parse("redis+sentinel://u:p%40ss@10.0.0.1:26380,[::1]:26381,sentinel-c/primary/3")
    assert found == SentinelUrl([("10.0.0.1", 26380), ("::1", 26381), ("sentinel-c", 26379)], "primary", 3, "u", "p@ss")
    assert sentinel.parse("redis+sentinel://h:1/svc").db == 0


@pytest.mark.parametrize(
    "url", ["redis+sentinel://h:1", "redis+sentinel://h:1/svc/x", "redis+sentinel://h:port/svc", "redis+sentinel:///s"]
)
def test_a_malformed_sentinel_url_names_the_setting_and_never_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as failed:
        sentinel.parse(url.replace("//", "//user:hunter2@"), "MCP_BATCH_REDIS_URL")
    assert str(failed.value).startswith("MCP_BATCH_REDIS_URL: ") and "hunter2" not in str(failed.value)


def test_arq_follows_the_sentinels() -> None:
    found = sentinel.arq_settings("redis+sentinel://:pw@h:1,g:2/svc/4")
    assert (found.sentinel, found.host, found.sentinel_master, found.database) == (True, [("h", 1), ("g", 2)], "svc", 4)
    assert found.password == "pw" and not sentinel.arq_settings("redis://h:6379/0").sentinel


class Answers:
    """GET /v1/batches/{id} every 50 ms while the batch runs: each answer's status code and when it came."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []

    async def poll(self, http: httpx.AsyncClient, batch_id: str) -> None:
        while True:
            try:
                code = (await http.get(f"/v1/batches/{batch_id}", timeout=5)).status_code
            except httpx.HTTPError:
                code = 0  # no answer at all
            self.seen.append((time.monotonic(), code))
            await asyncio.sleep(0.05)  # a sampling period, not a wait for a condition

    def unavailable_window(self) -> float:
        bad = [at for at, code in self.seen if code != 200]
        return bad[-1] - bad[0] if bad else 0.0


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_sentinel_failover_mid_batch_repeats_no_write(
    sentinels: SentinelSet, settings: Settings, fresh_backend: HttpBackendProcess
) -> None:
    settings = settings.model_copy(update={"redis_url": sentinels.url, "lease_seconds": 3.0, "sweep_seconds": 0.2})
    calls = [
        {"id": f"w{i}", "server": "counted", "tool": "tally_write", "arguments": {"key": f"w{i}", "seconds": 0.01}}
        for i in range(300)
    ]
    answers = Answers()
    async with (
        running_worker(settings),
        running_api(settings) as base_url,
        httpx.AsyncClient(base_url=base_url, timeout=60) as http,
    ):
        batch_id = (await submit(http, calls, max_concurrency=8, read_only=False))["id"]
        polling = asyncio.create_task(answers.poll(http, batch_id))
        await until_at_backend(fresh_backend, "tallies", 60)
        await sentinels.primary.stop(signal.SIGKILL)
        killed = time.monotonic()
        document = await ended_through_the_failover(http, batch_id)
        polling.cancel()
        items = await all_results(http, batch_id)
    tallies: dict[str, Any] = (await call_backend(fresh_backend.url, "stats"))["tallies"]
    assert await sentinels.primary_port() == sentinels.replica.port  # the replica was promoted
    assert document["counts"]["total"] == 300 and {item["status"] for item in items} <= TERMINAL_ITEM
    assert all(count == 1 for count in tallies.values()), {k: v for k, v in tallies.items() if v != 1}  # no write twice
    assert all(item["id"] in tallies for item in items if item["status"] == "ok")  # an ok write was sent
    assert {code for _, code in answers.seen} <= {200, 503}, "only 503 while no primary is known"
    ok = sum(item["status"] == "ok" for item in items)
    print(
        f"{sentinels.engine}: {ok}/300 ok, unavailable for {answers.unavailable_window():.2f} s, "
        f"completed {time.monotonic() - killed:.1f} s after the kill; others: "
        f"{sorted({(i['status'], (i['error'] or {}).get('code')) for i in items if i['status'] != 'ok'})}"
    )


async def _our_sentinel_links(sentinels: SentinelSet) -> int:
    """Connections the sentinels hold from clients, not from each other (theirs are named `sentinel-...`), less the
    one each count is read over."""
    found = 0
    for process in sentinels.sentinels:
        probe = aioredis.Redis(port=process.port, decode_responses=True)
        try:
            listed = await probe.client_list()
        finally:
            await probe.aclose()
        found += sum(not entry.get("name") for entry in listed) - 1
    return found


@pytest.mark.parametrize("sentinels", ["redis"], indirect=True)
async def test_the_control_pool_closes_each_failed_attempts_sentinel_links(
    sentinels: SentinelSet, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "_CONTROL_TRIES", 3)
    monkeypatch.setattr(connection, "_CONTROL_RETRY_DELAY", 0.0)
    before = await _our_sentinel_links(sentinels)
    unknown = settings.model_copy(update={"redis_url": sentinels.url.replace(f"/{SERVICE}/", "/not-monitored/")})
    with pytest.raises(MasterNotFoundError):
        await connection.control_pool(unknown)
    assert await _our_sentinel_links(sentinels) == before
    pool = await connection.control_pool(settings.model_copy(update={"redis_url": sentinels.url}))
    try:
        assert await pool.ping() and pool.default_queue_name == Keys(settings.key_prefix).queue
    finally:
        await connection.close(pool)
    assert await _our_sentinel_links(sentinels) == before
