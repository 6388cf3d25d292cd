"""`Client` against the real API, worker, Redis and demo backends. The client blocks, so each scenario runs in a
thread while the service answers in this test's event loop."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from mcp_batch.client import (
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    Unauthorized,
    Unreachable,
)
from mcp_batch.models import BatchDocument, BatchRequest, BatchStatus, Call, ItemResult, ItemStatus, Mode
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.support import ServiceHandle, free_port, running_service

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
ECHO = {"server": "demo", "tool": "echo"}
FAIL = {"id": "bad", "server": "demo", "tool": "fail"}


async def in_thread(scenario: Callable[[], T]) -> T:
    return await asyncio.to_thread(scenario)


async def test_submit_wait_with_progress_then_the_results_with_resume(service: ServiceHandle) -> None:
    def scenario() -> tuple[BatchDocument, list[BatchDocument], list[ItemResult], int | None, list[str], list[str]]:
        seen: list[BatchDocument] = []
        with Client(service.base_url) as client:
            calls = [{"id": f"e{n}", **ECHO, "arguments": {"message": str(n)}} for n in range(3)] + [FAIL]
            batch = client.submit(calls, mode="serial")
            done = client.wait(batch.id, timeout=60, progress=seen.append, poll=1)
            stream = client.results(batch.id)
            items = list(stream)
            later = [item.id for item in client.results(batch.id, after=2)]
            failed = [item.id for item in client.results(batch.id, status=[ItemStatus.error])]
        return done, seen, items, stream.next_after, later, failed

    done, seen, items, next_after, later, failed = await in_thread(scenario)
    assert done.status is BatchStatus.completed and done.mode is Mode.serial and done.failed_ids == ["bad"]
    assert seen and seen[-1].status is BatchStatus.completed and seen[-1].results == []  # polls carry no page
    assert [item.seq for item in items] == [1, 2, 3, 4] and next_after == 4
    assert [item.id for item in items] == ["e0", "e1", "e2", "bad"]
    assert items[0].structured_content == {"result": "0"}
    assert later == ["e2", "bad"] and failed == ["bad"]


async def test_a_batch_request_and_an_idempotency_key_make_one_batch(service: ServiceHandle) -> None:
    def scenario() -> tuple[str, str]:
        request = BatchRequest(calls=[Call(server="demo", tool="echo")], on_error="stop")
        with Client(service.base_url) as client:
            return (
                client.submit(request, idempotency_key="once").id,
                client.submit(request, idempotency_key="once").id,
            )

    first, again = await in_thread(scenario)
    assert first == again


async def test_a_submit_that_waits_answers_with_the_ended_batch_and_a_replay_with_it(service: ServiceHandle) -> None:
    def scenario() -> tuple[BatchDocument, BatchDocument]:
        with Client(service.base_url) as client:
            calls = [{**ECHO, "arguments": {"message": "hi"}}]
            return client.submit(calls, idempotency_key="w", wait=30), client.submit(
                calls, idempotency_key="w", wait=30
            )

    first, again = await in_thread(scenario)
    assert first.status is BatchStatus.completed and first.results[0].content == [{"type": "text", "text": "hi"}]
    assert again.id == first.id and again.results == first.results


async def test_item_joins_the_pages_of_a_large_item(service: ServiceHandle) -> None:
    def scenario() -> tuple[ItemResult, str | None]:
        with Client(service.base_url) as client:
            batch = client.submit([{"id": "large", "server": "demo", "tool": "big", "arguments": {"size": 700_000}}])
            client.wait(batch.id, timeout=60)
            return client.item(batch.id, "large"), client.item_page(batch.id, "large").next_cursor

    item, cursor = await in_thread(scenario)
    assert cursor is not None  # larger than one response
    assert item.status is ItemStatus.ok
    assert sum(len(block.get("text", "")) for block in item.content or []) >= 700_000


async def test_cancel_retry_list_and_validate(service: ServiceHandle) -> None:
    def scenario() -> dict[str, Any]:
        with Client(service.base_url) as client:
            sleeping = client.submit([{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}])
            cancelling = client.cancel(sleeping.id)
            ended = client.wait(sleeping.id, timeout=60)
            with pytest.raises(Conflict) as again:
                client.cancel(sleeping.id)
            failing = client.submit([ECHO, FAIL])
            client.wait(failing.id, timeout=60)
            retried = client.retry(failing.id)
            listed = client.list(limit=10)
            completed = client.list(status=[BatchStatus.cancelled])
            dry = client.validate([ECHO, {"server": "demo", "tool": "no_such_tool"}])
        return locals()

    found = await in_thread(scenario)
    assert found["cancelling"].status in (BatchStatus.cancelling, BatchStatus.cancelled)
    assert found["ended"].status is BatchStatus.cancelled
    assert found["again"].value.batch_status == "cancelled"
    assert found["retried"].retry_of == found["failing"].id and found["retried"].counts.total == 1
    assert [b.id for b in found["listed"].batches] == [found["retried"].id, found["failing"].id, found["sleeping"].id]
    assert [b.id for b in found["completed"].batches] == [found["sleeping"].id]
    assert found["dry"].valid is False
    assert [r.status for r in found["dry"].results] == [ItemStatus.pending, ItemStatus.unknown_tool]


async def test_events_come_in_order_and_resume_after_a_seq(settings: Settings) -> None:
    # a stream's time limit of half a second: the client reconnects with Last-Event-ID several times
    settings = settings.model_copy(update={"events_max_seconds": 0.5})
    calls = [{"id": f"s{n}", "server": "demo_http", "tool": "sleep", "arguments": {"seconds": 0.3}} for n in range(4)]
    async with running_service(settings) as service:

        def scenario() -> tuple[list[Any], list[Any]]:
            with Client(service.base_url) as client:
                batch = client.submit(calls, mode="serial")
                events = [(e.name, e.seq, e.data.get("id")) for e in client.events(batch.id)]
                resumed = [(e.name, e.seq) for e in client.events(batch.id, after=3)]
            return events, resumed

        events, resumed = await in_thread(scenario)
    items = [(seq, item_id) for name, seq, item_id in events if name == "item"]
    assert items == [(1, "s0"), (2, "s1"), (3, "s2"), (4, "s3")]  # once each, across the reconnects
    assert events[-1][0] == "end" and {name for name, _, _ in events} == {"item", "progress", "end"}
    assert [e for e in resumed if e[0] == "item"] == [("item", 4)] and resumed[-1][0] == "end"


async def test_a_json_lines_upload_from_bytes_and_from_a_file(service: ServiceHandle, tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text(json.dumps(ECHO) + "\n" + json.dumps(ECHO) + "\n")

    def scenario() -> tuple[BatchDocument, BatchDocument, InvalidRequest]:
        with Client(service.base_url) as client:
            small = client.upload(json.dumps(ECHO).encode(), read_only=True, mode="serial")
            large = client.upload(path)
            with pytest.raises(InvalidRequest) as bad:
                client.upload(b'{"server": "demo"}\n')
        return small, large, bad.value

    small, large, bad = await in_thread(scenario)
    assert small.mode is Mode.serial and small.counts.total == 1 and large.counts.total == 2
    assert [(p.loc, p.describe()) for p in bad.problems] == [
        (("body", "line", 1, "tool"), "line 1, field 'tool': Field required")
    ]


async def test_errors_carry_the_problems_and_name_what_is_missing(service: ServiceHandle) -> None:
    def scenario() -> tuple[InvalidRequest, InvalidRequest, NotFound, Unreachable]:
        with Client(service.base_url) as client:
            with pytest.raises(InvalidRequest) as local:  # found before anything is sent
                client.submit([{"tool": "echo"}])
            with pytest.raises(InvalidRequest) as served:  # only the server knows its ceiling
                client.submit([ECHO], max_concurrency=100_000)
            with pytest.raises(NotFound) as missing:
                client.get("no-such-batch")
        with Client(f"http://127.0.0.1:{free_port()}") as nowhere, pytest.raises(Unreachable) as unreachable:
            nowhere.list()
        return local.value, served.value, missing.value, unreachable.value

    local, served, missing, unreachable = await in_thread(scenario)
    assert [(p.loc, p.msg) for p in local.problems] == [(("calls", 0, "server"), "Field required")]
    assert served.status_code == 422 and [p.loc for p in served.problems] == [("body", "max_concurrency")]
    assert missing.status_code == 404 and missing.detail == "batch 'no-such-batch' not found"
    assert "could not reach the mcp-batch server at" in str(unreachable)


async def test_an_api_key_is_sent_and_a_missing_one_is_unauthorized(settings: Settings, tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"sha256": hash_key("mcpb_test-key"), "tenant": "t"}]}))
    async with running_service(settings.model_copy(update={"auth": "keys", "keys": keys})) as service:

        def scenario() -> tuple[int, Unauthorized]:
            with Client(service.base_url, api_key="mcpb_test-key") as client:
                listed = len(client.list().batches)
            with Client(service.base_url) as anonymous, pytest.raises(Unauthorized) as refused:
                anonymous.list()
            return listed, refused.value

        listed, refused = await in_thread(scenario)
    assert listed == 0 and refused.status_code == 401


async def test_a_read_only_key_is_forbidden_to_cancel_or_delete_naming_the_right(
    settings: Settings, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"sha256": hash_key("mcpb_test-key"), "tenant": "t"}]}))
    async with running_service(settings.model_copy(update={"auth": "keys", "keys": keys})) as service:

        def scenario() -> list[Forbidden]:
            refusals = []
            with Client(service.base_url, api_key="mcpb_test-key") as client:
                batch = client.submit([{"server": "demo_http", "tool": "echo", "arguments": {}}])
                for act in (client.cancel, client.delete):
                    with pytest.raises(Forbidden) as refused:
                        act(batch.id)
                    refusals.append(refused.value)
            return refusals

        refusals = await in_thread(scenario)
    assert [r.status_code for r in refusals] == [403, 403]
    assert [r.problems[0].msg.split(" needs")[0] for r in refusals] == ["cancelling a batch", "deleting a batch"]


async def test_a_429_is_asked_again_after_its_retry_after(settings: Settings) -> None:
    settings = settings.model_copy(update={"max_unfinished_items": 1, "backpressure_retry_after_seconds": 1})
    async with running_service(settings) as service:

        def scenario() -> tuple[RateLimited, float, BatchDocument]:
            with (
                Client(service.base_url, max_retries=0) as impatient,
                Client(service.base_url, max_retries=20) as patient,
            ):
                first = patient.submit([{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 1.5}}])
                with pytest.raises(RateLimited) as refused:
                    impatient.submit([ECHO])
                started = time.monotonic()
                second = patient.submit([ECHO])  # refused until the first ends, then taken
                waited = time.monotonic() - started
                patient.wait(first.id, timeout=60)
            return refused.value, waited, second

        refused, waited, second = await in_thread(scenario)
    assert refused.status_code == 429 and refused.retry_after == 1.0
    assert waited >= 1.0 and second.counts.total == 1


async def test_metadata_the_list_filters_and_delete(service: ServiceHandle) -> None:
    def scenario() -> None:
        with Client(service.base_url) as client:
            tagged = client.submit([ECHO], metadata={"job": "nightly"})
            client.submit([ECHO])
            assert [b.id for b in client.list(metadata={"job": "nightly"}).batches] == [tagged.id]
            client.wait(tagged.id, timeout=60)
            client.delete(tagged.id)
            assert client.list(metadata={"job": "nightly"}).batches == []
            with pytest.raises(NotFound):
                client.delete(tagged.id)

    await in_thread(scenario)
