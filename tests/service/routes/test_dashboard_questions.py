"""A backend's question on the dashboard, in Debian's chromium through Playwright: the batch page shows a form made
from the elicitation's requested schema, the reader fills it in and accepts, and the item goes on to `ok` with the
answer; the same batch followed over REST meanwhile. Skips without /usr/bin/chromium, as the other browser tests."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from playwright.async_api import Browser, expect

from mcp_batch.keys import Keys
from mcp_batch.store import Store
from tests.service.routes.test_dashboard_browser import browser, open_page
from tests.support import ServiceHandle, by_id, eventually, finished, submit
from tests.third_party import everything_stdio

__all__ = ["browser"]  # the fixture, shared with the other browser tests

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


async def test_the_page_shows_a_form_from_the_requested_schema_and_the_answer_reaches_the_backend(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser
) -> None:
    page, problems = await open_page(browser)
    call = {"id": "ask", "server": "everything", "tool": "trigger-elicitation-request"}
    batch = await submit(client, [call], read_only=False, questions={"policy": "ask", "wait_seconds": 60.0})
    await page.goto(f"{service.base_url}/ui/#/batch/{batch['id']}")
    form = page.locator('#questions .question[data-item="ask"]')
    await expect(form).to_be_visible(timeout=30_000)
    await expect(page.locator('#counts dd[data-count="input_required"]')).to_have_text("1")
    item = (await client.get(f"/v1/batches/{batch['id']}/items/ask")).json()
    assert item["status"] == "input_required" and item["input_request"]["kind"] == "elicitation"

    await form.locator('input[name="name"]').fill("Ada Lovelace")
    await form.locator('input[name="integer"]').fill("500")  # over the schema's maximum of 100
    await form.locator('[data-answer="accept"]').click()
    await expect(form.locator(".fault")).to_contain_text("content.integer: is outside the allowed range")
    await form.locator('input[name="integer"]').fill("7")
    await form.locator('input[name="check"]').check()
    await form.locator('select[name="untitledSingleSelectEnum"]').select_option("Joey")
    await form.locator('[data-answer="accept"]').click()
    await expect(page.locator("#questions")).to_be_hidden()
    await expect(page.locator("#batch-status")).to_have_text("completed", timeout=30_000)

    done = by_id(await finished(client, batch["id"]))["ask"]
    text = "".join(block.get("text", "") for block in done["content"])
    assert done["status"] == "ok" and "Ada Lovelace" in text and '"integer": 7' in text and "Joey" in text
    assert problems == []


def stored_question(question_id: str, params: dict[str, Any]) -> bytes:
    asked = {"id": question_id, "kind": "elicitation", "method": "elicitation/create", "params": params}
    return json.dumps(asked | {"asked_at": "2026-01-01T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"}).encode()


async def test_a_question_the_page_cannot_show_hides_no_other_question(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser, redis: aioredis.Redis
) -> None:
    page, problems = await open_page(browser)
    sleep = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}
    batch = await submit(client, [{"id": "odd", **sleep}, {"id": "fine", **sleep}], max_concurrency=2)
    await eventually(lambda: running_both(client, batch["id"]), what="both items running", timeout=30)
    # Stored as a question from before the worker checked schemas would be: a field that is null.
    store = Store(redis, Keys(service.settings.key_prefix), 3600)
    odd = {"message": "odd", "requestedSchema": {"type": "object", "properties": {"x": None}}}
    fine = {"message": "fine", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}
    await store.questions.ask(batch["id"], 0, stored_question("q-odd", odd), 60)
    await store.questions.ask(batch["id"], 1, stored_question("q-fine", fine), 60)

    await page.goto(f"{service.base_url}/ui/#/batch/{batch['id']}")
    shown = page.locator('#questions .question[data-item="fine"]')
    await expect(shown.locator('input[name="name"]')).to_be_visible(timeout=30_000)
    unshowable = page.locator('#questions .question[data-item="odd"]')
    await expect(unshowable.locator(".unshowable")).to_contain_text("cannot be shown as a form")
    await expect(unshowable.locator('[data-answer="accept"]')).to_be_hidden()
    await expect(unshowable.locator('[data-answer="decline"]')).to_be_visible()
    await client.post(f"/v1/batches/{batch['id']}/cancel")
    assert problems == []


async def running_both(client: httpx.AsyncClient, batch_id: str) -> bool:
    document = (await client.get(f"/v1/batches/{batch_id}", params={"limit": 0})).json()
    return bool(document["counts"]["running"] == 2)
