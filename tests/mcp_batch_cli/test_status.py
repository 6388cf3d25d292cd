"""`mcp-batch status` against the real Redis, with a real worker running and with none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.conftest import REDIS_URL
from tests.support import ServiceHandle, cli, eventually, free_port, live_workers, run_batch

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def operator_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's environment: the same Redis and servers file as the service."""
    monkeypatch.setenv("MCP_BATCH_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("MCP_BATCH_SERVERS", str(settings.servers))


@pytest.mark.usefixtures("operator_env")
async def test_status_shows_a_live_worker_and_the_backends_and_exits_0(
    service: ServiceHandle, redis: aioredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert service.worker is not None
    await live_workers(redis, 1)  # the worker may still be starting: its first heartbeat
    code = await cli("status")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "workers    1 alive, 0 stale" in out
    row = next(line.split() for line in out.splitlines() if service.worker.ctx["state"].worker_id in line)
    assert row[-1] == "alive"
    assert "queue      0 shard jobs queued or running" in out
    assert "leases     0 shard job leases held, 0 lapsed" in out
    backends = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  demo")}
    assert backends["demo"][1] == "stdio" and backends["demo_http"][1] == "http"
    assert "NOT READY" not in out


@pytest.mark.usefixtures("operator_env")
async def test_status_json_shows_cached_tools_after_a_batch(
    service: ServiceHandle, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_batch(client, [{"server": "demo_http", "tool": "echo"}])

    async def report_once_the_job_has_left() -> dict[str, Any] | None:
        # The batch is done once its last record is stored; its shard job leaves the queue a moment later.
        code = await cli("status", "--json")
        report: dict[str, Any] = json.loads(capsys.readouterr().out)
        assert code == 0 and report["ok"] is True
        return report if report["queue_depth"] == 0 and report["job_leases"]["held"] == 0 else None

    report = await eventually(report_once_the_job_has_left, what="the shard job to leave the queue", timeout=10)
    assert [w["alive"] for w in report["workers"]] == [True]
    assert report["queue_depth"] == 0 and report["unfinished_items"] == 0
    assert report["job_leases"] == {"held": 0, "lapsed": 0}
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["demo_http"]["tools_cached"] is True and backends["demo_http"]["leases_in_use"] == 0
    assert backends["demo"]["transport"] == "stdio" and "env" not in backends["demo"]


@pytest.mark.usefixtures("operator_env")
async def test_status_without_a_live_worker_exits_1(redis: aioredis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    seconds, _ = await redis.time()
    await redis.zadd(Keys().workers, {"gone:1": (seconds - 90) * 1000})
    code = await cli("status")
    out = capsys.readouterr().out
    assert code == 1
    assert "workers    0 alive, 1 stale" in out and "NOT READY: no live worker" in out
    row = next(line.split() for line in out.splitlines() if "gone:1" in line)
    assert 90 <= float(row[1].removesuffix("s")) < 120 and row[-1] == "stale"


async def test_status_needs_none_of_the_backends_credentials(
    redis: aioredis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${MCPB_UNSET_TOKEN}"}}
    servers = {"docs": docs | {"max_concurrency": 4}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    monkeypatch.delenv("MCPB_UNSET_TOKEN", raising=False)
    monkeypatch.setenv("MCP_BATCH_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("MCP_BATCH_SERVERS", str(path))
    await cli("status")
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  docs"))
    assert row[1:] == ["http", "30s", "4", "-", "0/4", "not", "cached"]


async def test_status_with_redis_unreachable_exits_1_and_hides_the_password(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    monkeypatch.setenv("MCP_BATCH_REDIS_URL", f"redis://ops:hunter2-pw@127.0.0.1:{port}/0")
    monkeypatch.setenv("MCP_BATCH_SERVERS", str(settings.servers))
    code = await cli("status", "--json")
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert code == 1 and report["ok"] is False
    assert report["redis"] == {"url": f"redis://127.0.0.1:{port}/0", "error": "ConnectionError"}
    assert "hunter2" not in captured.out + captured.err
