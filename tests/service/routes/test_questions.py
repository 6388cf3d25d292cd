"""A backend's question during a call becomes the item's input request over REST, against server-everything's
elicitation and sampling tools over stdio: asked, shown, answered, and the call goes on; declined at once by
default; a wait that runs out answers `cancel`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import by_id, eventually, finished, submit
from tests.third_party import everything_command

pytestmark = pytest.mark.timeout(120)

ASK = {"policy": "ask", "wait_seconds": 60.0}


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = {"command": everything_command(), "args": ["stdio"]}
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
