"""Structured logs: the JSON formatter, ids bound per job and per item, and no argument value or credential in any
line. The worker-process tests run `mcp-batch worker` with MCP_BATCH_LOG_FORMAT=json and read its stderr."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.ops import logs
from mcp_batch.settings import Settings
from tests.support import by_id, finished, live_workers, run_batch, running_api, submit, worker_processes

pytestmark = pytest.mark.timeout(60)

TOKEN = "tok-logs-5e8a2c91"  # a backend credential, from the environment
ARGUMENT = "arg-logs-0b7d3f64"  # an argument value


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """A JSON handler on a logger of the test's own, as `configure("json")` sets one up on the root."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("tests.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_holds_ts_level_logger_and_message(json_log: io.StringIO) -> None:
    logging.getLogger("tests.logs").warning("batch %s has %d items", "b1", 3)
    (line,) = lines(json_log)
    assert set(line) == {"ts", "level", "logger", "message"}
    assert line["level"] == "WARNING" and line["logger"] == "tests.logs" and line["message"] == "batch b1 has 3 items"
    assert line["ts"].endswith("Z") and "T" in line["ts"]


async def test_ids_bound_in_a_task_are_on_its_lines_and_its_childrens(json_log: io.StringIO) -> None:
    logger = logging.getLogger("tests.logs")

    async def item(index: int) -> None:
        logs.bind(item_id=f"i{index}", index=index, server="demo")
        logger.info("item")

    async def job() -> None:
        logs.bind(batch_id="b1", job="b1:0:0")
        await asyncio.gather(item(0), item(1))
        logger.info("job done")

    await asyncio.create_task(job())
    logger.info("outside")
    items, done, outside = lines(json_log)[:2], lines(json_log)[2], lines(json_log)[3]
    assert [(line["item_id"], line["index"], line["batch_id"], line["job"]) for line in items] == [
        ("i0", 0, "b1", "b1:0:0"),
        ("i1", 1, "b1", "b1:0:0"),
    ]
    assert "item_id" not in done and done["batch_id"] == "b1"  # a lane's item stays in the lane
    assert not set(outside) & set(logs.FIELDS)


def test_an_exception_is_one_string_field(json_log: io.StringIO) -> None:
    try:
        raise ValueError("broken")
    except ValueError:
        logging.getLogger("tests.logs").exception("it failed")
    (line,) = lines(json_log)
    assert line["message"] == "it failed"
    assert line["exc_info"].startswith("Traceback (most recent call last):")
    assert line["exc_info"].endswith("ValueError: broken")


def test_stack_only_withholds_the_exception_message() -> None:
    try:
        raise KeyError(ARGUMENT)
    except KeyError as exc:
        text = logs.stack_only(exc)
    assert "test_stack_only_withholds_the_exception_message" in text and "KeyError (message withheld)" in text
    assert ARGUMENT not in text


@pytest.fixture
def servers(servers: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("MCPB_LOGS_TEST_TOKEN", TOKEN)
    servers["locked"] = {"url": servers["demo_http"]["url"], "headers": {"X-Token": "${MCPB_LOGS_TEST_TOKEN}"}}
    return servers


def worker_lines(tmp_path: Path) -> list[dict[str, Any]]:
    """The worker's stderr, one JSON object per line (a line that is not JSON fails the test)."""
    text = (tmp_path / "worker-0.log").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
async def test_a_worker_logs_json_lines_with_the_batch_and_item_they_belong_to(
    settings: Settings, redis: aioredis.Redis, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"log_format": "json"})
    calls = [
        {"id": "freeze", "server": "quick", "tool": "hang", "arguments": {"block": True}},
        {"id": "after", "server": "quick", "tool": "echo", "arguments": {"message": "new process"}},
    ]
    async with running_api(settings) as base_url, httpx.AsyncClient(base_url=base_url, timeout=60) as api:
        with worker_processes(settings, 1, tmp_path):
            await live_workers(redis, 1)
            batch_id = (await submit(api, calls, mode="serial"))["id"]
            document = await finished(api, batch_id)
    assert by_id(document)["after"]["status"] == "ok"
    records = worker_lines(tmp_path)
    worker = document["results"][0]["worker"]
    ready = next(line for line in records if "ready for" in line["message"])
    assert ready["worker"] == worker and ready["level"] == "INFO"
    # the frozen backend is replaced while the second item waits for it: that line names the item
    (reopen,) = [line for line in records if "does not answer a ping" in line["message"]]
    assert reopen["logger"] == "worker.sessions" and reopen["level"] == "WARNING"
    assert {k: reopen[k] for k in ("batch_id", "job", "item_id", "index", "server", "worker")} == {
        "batch_id": batch_id,
        "job": f"{batch_id}:0:0",
        "item_id": "after",
        "index": 1,
        "server": "quick",
        "worker": worker,
    }
    done = next(line for line in records if "has no more items to run" in line["message"])
    assert done["batch_id"] == batch_id and "item_id" not in done  # the job's own line: no item


async def test_no_log_line_holds_an_argument_value_or_a_credential(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    for name in logs.QUIET:
        caplog.set_level(logging.WARNING, logger=name)
    caplog.set_level(logging.INFO)  # last: it sets the capturing handler's level too; as `mcp-batch worker` logs
    calls = [
        {"server": "locked", "tool": "echo", "arguments": {"message": ARGUMENT}},
        {"server": "demo_http", "tool": "measure", "arguments": {"value": ARGUMENT}},  # fails the tool's schema
        {"server": "demo_http", "tool": "no_such_tool", "arguments": {"data": ARGUMENT}},
        {"server": "demo_http", "tool": "fail", "arguments": {"reason": ARGUMENT}},
        {"server": "nowhere", "tool": "echo", "arguments": {"message": ARGUMENT}},
        {"server": "demo_http", "tool": "echo", "arguments": {"message": f"@{ARGUMENT}.x"}},
    ]
    document = await run_batch(client, calls)
    assert document["counts"]["succeeded"] == 2
    assert any(document["id"] in r.getMessage() for r in caplog.records)  # the worker did log this batch
    assert ARGUMENT not in caplog.text and TOKEN not in caplog.text
