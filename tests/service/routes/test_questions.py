"""A backend's question during a call becomes the item's input request over REST, against server-everything's
elicitation and sampling tools over stdio: asked, shown, answered, and the call goes on; declined at once by
default; a wait that runs out answers `cancel`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.service.routes.test_stream import sse
from tests.support import by_id, eventually, finished, running_service, submit
from tests.third_party import everything_stdio

pytestmark = pytest.mark.timeout(120)

ASK = {"policy": "ask", "wait_seconds": 60.0}


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


def elicit(item_id: str = "ask") -> dict[str, Any]:
    return {"id": item_id, "server": "everything", "tool": "trigger-elicitation-request"}


async def asked(client: httpx.AsyncClient, batch_id: str, item_id: str = "ask") -> dict[str, Any]:
    """The item once its backend's question is stored (a question has no event a test can wait on but its item)."""

    async def waiting() -> dict[str, Any] | None:
        item: dict[str, Any] = (await client.get(f"/v1/batches/{batch_id}/items/{item_id}")).json()
        return item if item["status"] == "input_required" else None

    return await eventually(waiting, what=f"item {item_id} asked a question", timeout=60)


async def test_an_elicitation_is_the_items_input_request_and_the_answer_reaches_the_backend(
    client: httpx.AsyncClient,
) -> None:
    batch = await submit(client, [elicit()], read_only=False, questions=ASK)
    item = await asked(client, batch["id"])
    question = item["input_request"]
    assert question["kind"] == "elicitation" and question["method"] == "elicitation/create"
    assert "name" in question["params"]["requestedSchema"]["required"]
    document = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert document["status"] == "running"
    assert document["counts"]["input_required"] == 1 and document["counts"]["running"] == 0
    assert by_id(document)["ask"]["status"] == "input_required"
    listed = (await client.get(f"/v1/batches/{batch['id']}/questions")).json()["questions"]
    assert [(q["item_id"], q["input_request"]["id"]) for q in listed] == [("ask", question["id"])]

    answer = {"action": "accept", "content": {"name": "Ada Lovelace", "check": True, "integer": 7}}
    response = await client.post(f"/v1/batches/{batch['id']}/items/ask/input", json=answer)
    assert response.status_code == 200, response.text
    assert response.json() == {"item_id": "ask", "request_id": question["id"], "action": "accept"}

    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and "input_request" not in done
    text = "".join(block.get("text", "") for block in done["content"])
    assert "Ada Lovelace" in text and '"action": "accept"' in text
    again = await client.post(f"/v1/batches/{batch['id']}/items/ask/input", json={"action": "decline"})
    assert again.status_code == 409


async def test_an_answer_that_does_not_fit_the_schema_is_refused_naming_the_field_not_its_value(
    client: httpx.AsyncClient,
) -> None:
    batch = await submit(client, [elicit()], read_only=False, questions=ASK)
    await asked(client, batch["id"])
    secret = "not-a-number-secret"
    bad = {"action": "accept", "content": {"integer": secret, "nope": 1}}
    response = await client.post(f"/v1/batches/{batch['id']}/items/ask/input", json=bad)
    assert response.status_code == 422 and secret not in response.text
    faults = {tuple(fault["loc"]): fault["msg"] for fault in response.json()["detail"]}
    assert set(faults) == {("body", "content", "integer"), ("body", "content", "nope"), ("body", "content", "name")}
    declined = await client.post(f"/v1/batches/{batch['id']}/items/ask/input", json={"action": "decline"})
    assert declined.status_code == 200
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert "decline" in "".join(block.get("text", "") for block in done["content"])


async def test_a_batch_that_sets_no_policy_declines_at_once(client: httpx.AsyncClient) -> None:
    batch = await submit(client, [elicit()], read_only=False)
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and "decline" in "".join(block.get("text", "") for block in done["content"])


async def test_a_wait_that_runs_out_answers_the_backend_cancel(client: httpx.AsyncClient) -> None:
    batch = await submit(client, [elicit()], read_only=False, questions={"policy": "ask", "wait_seconds": 1.0})
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and "cancel" in "".join(block.get("text", "") for block in done["content"])
    assert (await client.get(f"/v1/batches/{batch['id']}/questions")).json() == {"questions": []}


async def test_a_sampling_request_is_answered_with_the_callers_message(client: httpx.AsyncClient) -> None:
    call = {"id": "ask", "server": "everything", "tool": "trigger-sampling-request", "arguments": {"prompt": "hi"}}
    batch = await submit(client, [call], read_only=False, questions=ASK)
    question = (await asked(client, batch["id"]))["input_request"]
    assert question["kind"] == "sampling" and question["params"]["messages"][0]["role"] == "user"
    message = {"role": "assistant", "content": {"type": "text", "text": "written by the caller"}, "model": "human"}
    response = await client.post(
        f"/v1/batches/{batch['id']}/items/ask/input", json={"action": "accept", "content": message}
    )
    assert response.status_code == 200, response.text
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and "written by the caller" in done["content"][0]["text"]


async def test_an_input_required_result_is_asked_the_same_way_and_its_round_carries_the_answer(
    client: httpx.AsyncClient,
) -> None:
    call = {"id": "ask", "server": "demo", "tool": "ask_round", "arguments": {"message": "Ship it?"}}
    batch = await submit(client, [call], questions=ASK)
    question = (await asked(client, batch["id"]))["input_request"]
    assert question["params"]["message"] == "Ship it?" and question["params"]["requestedSchema"]["required"] == ["go"]
    answer = {"action": "accept", "content": {"go": True}}
    assert (await client.post(f"/v1/batches/{batch['id']}/items/ask/input", json=answer)).status_code == 200
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and done["content"][0]["text"] == 'answered accept: {"go": true}'


@pytest.mark.parametrize(
    "field",
    [{"type": "integer", "minimum": "5"}, {"type": "string", "enum": 5}, {"type": "string", "oneOf": ["x"]}],
)
async def test_a_question_whose_schema_is_malformed_is_declined_to_the_backend_never_shown(
    client: httpx.AsyncClient, field: dict[str, Any]
) -> None:
    schema = {"type": "object", "properties": {"go": field}}
    call = {"id": "ask", "server": "demo", "tool": "ask_round", "arguments": {"schema": schema}}
    batch = await submit(client, [call], questions=ASK)
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and done["content"][0]["text"] == "answered decline: null"
    assert (await client.get(f"/v1/batches/{batch['id']}/questions")).json() == {"questions": []}


async def test_an_answer_is_capped_like_arguments_and_its_bytes_are_counted_with_the_batchs(
    client: httpx.AsyncClient, settings: Settings, redis: aioredis.Redis
) -> None:
    schema = {"type": "object", "properties": {"go": {"type": "string"}}}
    call = {"id": "ask", "server": "demo", "tool": "ask_round", "arguments": {"schema": schema}}
    batch = await submit(client, [call], questions=ASK)
    await asked(client, batch["id"])
    path = f"/v1/batches/{batch['id']}/items/ask/input"
    huge = await client.post(path, json={"action": "accept", "content": {"go": "x" * settings.max_argument_bytes}})
    assert huge.status_code == 422, huge.text
    assert huge.json()["detail"][0]["loc"][-1] == "content" and "MCP_BATCH_MAX_ARGUMENT_BYTES" in huge.text
    keys = Keys(settings.key_prefix)
    before = int(await redis.get(keys.tenant_stored_bytes("default")) or 0)
    fits = {"action": "accept", "content": {"go": "y" * 1_000}}
    assert (await client.post(path, json=fits)).status_code == 200
    after = int(await redis.get(keys.tenant_stored_bytes("default")) or 0)
    assert after - before == len(orjson.dumps(fits))  # the stored answer: {action, content}
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["status"] == "ok" and done["content"][0]["text"].startswith('answered accept: {"go": "yyy')


WRITER, READER, OTHER = "mcpb_writer-key", "mcpb_reader-key", "mcpb_other-key"


def as_(base_url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


async def test_only_the_batchs_tenant_sees_or_answers_and_a_sampling_request_needs_write(
    settings: Settings, tmp_path: Path
) -> None:
    keys = [
        {"sha256": hash_key(WRITER), "tenant": "alpha", "write": True},
        {"sha256": hash_key(READER), "tenant": "alpha"},
        {"sha256": hash_key(OTHER), "tenant": "beta", "write": True},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    keyed = settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json"})
    call = {"id": "ask", "server": "everything", "tool": "trigger-sampling-request", "arguments": {"prompt": "hi"}}
    message = {"role": "assistant", "content": {"type": "text", "text": "from the writer"}, "model": "human"}
    async with running_service(keyed) as service, as_(service.base_url, WRITER) as writer:
        batch = await submit(writer, [call], read_only=False, questions=ASK)
        where = f"/v1/batches/{batch['id']}"
        await asked(writer, batch["id"])
        async with as_(service.base_url, OTHER) as other:
            for response in (
                await other.get(f"{where}/items/ask"),
                await other.get(f"{where}/questions"),
                await other.post(f"{where}/items/ask/input", json={"action": "accept", "content": message}),
            ):
                assert response.status_code == 404, response.text
        async with as_(service.base_url, READER) as reader:
            seen = (await reader.get(f"{where}/questions")).json()["questions"]
            assert [q["input_request"]["kind"] for q in seen] == ["sampling"]  # the tenant's read key sees it
            refused = await reader.post(f"{where}/items/ask/input", json={"action": "accept", "content": message})
            assert refused.status_code == 403 and "write" in refused.text
        answered = await writer.post(f"{where}/items/ask/input", json={"action": "accept", "content": message})
        assert answered.status_code == 200, answered.text
        done = by_id(await finished(writer, batch["id"]))["ask"]
        assert done["status"] == "ok" and "from the writer" in done["content"][0]["text"]


async def test_the_event_stream_announces_the_question_once_then_the_answered_item_and_the_end(
    client: httpx.AsyncClient,
) -> None:
    batch = await submit(client, [elicit()], read_only=False, questions=ASK)
    seen = []
    async with client.stream("GET", f"/v1/batches/{batch['id']}/events") as response:
        async for event in sse(response):
            seen.append(event)
            if event.event == "input_required":
                assert event.data["id"] == "ask" and event.data["kind"] == "elicitation"
                answer = {"action": "accept", "content": {"name": "Ada"}, "request_id": event.data["request_id"]}
                answered = await client.post(f"/v1/batches/{batch['id']}/items/ask/input", json=answer)
                assert answered.status_code == 200
    names = [event.event for event in seen]
    assert names.count("input_required") == 1 and names[-1] == "end"
    assert names.index("input_required") < names.index("item")
    waiting = [e.data["counts"] for e in seen if e.event == "progress" and e.data["counts"]["input_required"]]
    assert waiting and all(counts["running"] == 0 for counts in waiting)
