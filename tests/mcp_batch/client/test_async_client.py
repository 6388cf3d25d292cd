"""`AsyncClient` against the real API, worker, Redis and demo backends, in the service's own event loop."""

from __future__ import annotations

import json

import pytest

from mcp_batch.client import AsyncClient, Conflict, InvalidRequest, NotFound
from mcp_batch.models import BatchDocument, BatchStatus, ItemStatus
from tests.support import ServiceHandle

pytestmark = pytest.mark.timeout(120)

ECHO = {"server": "demo", "tool": "echo"}
FAIL = {"id": "bad", "server": "demo", "tool": "fail"}


async def test_submit_wait_results_events_and_item(service: ServiceHandle) -> None:
    shown: list[int] = []

    async def progress(document: BatchDocument) -> None:  # a coroutine callback is awaited
        shown.append(document.counts.total - document.counts.pending - document.counts.running)

    async with AsyncClient(service.base_url) as client:
        calls = [{"id": f"e{n}", **ECHO, "arguments": {"message": str(n)}} for n in range(3)] + [FAIL]
        batch = await client.submit(calls)
        done = await client.wait(batch.id, timeout=60, progress=progress, poll=1)
        stream = client.results(batch.id, after=1)
        later = [item.seq async for item in stream]
        raw = [json.loads(line)["id"] async for line in client.results(batch.id, status=["error"]).lines()]
        events = [(e.name, e.seq) async for e in client.events(batch.id)]
        item = await client.item(batch.id, "e1")
    assert done.status is BatchStatus.completed and done.failed_ids == ["bad"] and shown[-1] == 4
    assert later == [2, 3, 4] and stream.next_after == 4 and raw == ["bad"]
    assert [seq for name, seq in events if name == "item"] == [1, 2, 3, 4] and events[-1] == ("end", None)
    assert item.status is ItemStatus.ok and item.structured_content == {"result": "1"}


async def test_cancel_retry_list_validate_upload_and_errors(service: ServiceHandle) -> None:
    async with AsyncClient(service.base_url) as client:
        sleeping = await client.submit([{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}])
        await client.cancel(sleeping.id)
        assert (await client.wait(sleeping.id, timeout=60)).status is BatchStatus.cancelled
        with pytest.raises(Conflict):
            await client.cancel(sleeping.id)
        retried = await client.retry(sleeping.id, idempotency_key="retry-once")
        assert retried.retry_of == sleeping.id
        assert (await client.retry(sleeping.id, idempotency_key="retry-once")).id == retried.id
        assert [b.id for b in (await client.list()).batches] == [retried.id, sleeping.id]
        dry = await client.validate([ECHO, {"server": "nowhere", "tool": "echo"}])
        assert [r.status for r in dry.results] == [ItemStatus.pending, ItemStatus.unknown_server]
        dry = await client.validate_upload(b'{"server": "demo", "tool": "echo"}\n')
        assert dry.valid is True
        uploaded = await client.upload(b'{"server": "demo", "tool": "echo"}\n', on_error="stop")
        assert uploaded.on_error == "stop"
        with pytest.raises(InvalidRequest) as bad:
            await client.upload(b'{"server": "demo", "tool": "echo"}\n[]\n')
        assert [p.loc for p in bad.value.problems] == [("body", "line", 2)]
        with pytest.raises(NotFound):
            await client.item(uploaded.id, "no-such-item")


async def test_a_retry_takes_settings_that_replace_the_batch_s_and_checks_them_first(service: ServiceHandle) -> None:
    async with AsyncClient(service.base_url) as client:
        failed = await client.submit([FAIL], mode="serial", deadline_seconds=60.0)
        await client.wait(failed.id, timeout=60)
        retried = await client.retry(failed.id, retention_seconds=120, deadline_seconds=None)
        assert (retried.mode, retried.retention_seconds, retried.deadline_at) == ("serial", 120, None)
        assert retried.settings_from is not None and retried.settings_from["mode"] == failed.id
        assert retried.settings_from["retention_seconds"] == retried.id
        with pytest.raises(InvalidRequest) as bad:
            await client.retry(failed.id, mode="sideways", no_such_setting=1)
        assert sorted(p.loc for p in bad.value.problems) == [("mode",), ("no_such_setting",)]


async def test_metadata_on_submit_and_upload_the_list_filters_and_delete(service: ServiceHandle) -> None:
    async with AsyncClient(service.base_url) as client:
        tagged = await client.submit([ECHO], metadata={"job": "nightly"})
        uploaded = await client.upload(json.dumps(ECHO).encode() + b"\n", metadata={"job": "nightly", "n": "2"})
        other = await client.submit([ECHO], metadata={"job": "hourly"})
        assert tagged.metadata == {"job": "nightly"} and uploaded.metadata == {"job": "nightly", "n": "2"}
        listed = await client.list(metadata={"job": "nightly"})
        assert [b.id for b in listed.batches] == [uploaded.id, tagged.id]
        assert [b.id for b in (await client.list(metadata={"job": "nightly", "n": "2"})).batches] == [uploaded.id]
        after = [b.id for b in (await client.list(created_after=tagged.created_at)).batches]
        assert after == [other.id, uploaded.id]
        with pytest.raises(InvalidRequest) as bad:
            await client.list(created_before="soon")
        assert bad.value.problems[0].loc == ("query", "created_before")
        running = await client.submit([{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}])
        with pytest.raises(Conflict) as refused:
            await client.delete(running.id)
        assert refused.value.batch_status in {"queued", "running"}
        await client.wait(tagged.id, timeout=60)
        await client.delete(tagged.id)
        with pytest.raises(NotFound):
            await client.get(tagged.id)
        await client.cancel(running.id)


async def test_a_submit_or_upload_that_waits_answers_with_the_ended_batch(service: ServiceHandle) -> None:
    async with AsyncClient(service.base_url) as client:
        done = await client.submit([{**ECHO, "arguments": {"message": "hi"}}], wait=30)
        uploaded = await client.upload(b'{"server": "demo", "tool": "echo", "arguments": {"message": "up"}}\n', wait=30)
    assert done.status is BatchStatus.completed and done.results[0].content == [{"type": "text", "text": "hi"}]
    assert uploaded.status is BatchStatus.completed and uploaded.results[0].content == [{"type": "text", "text": "up"}]
