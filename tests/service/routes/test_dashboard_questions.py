"""A backend's question on the dashboard, in Debian's chromium through Playwright: the batch page shows a form made
from the elicitation's requested schema, the reader fills it in and accepts, and the item goes on to `ok` with the
answer; the same batch followed over REST meanwhile. Skips without /usr/bin/chromium, as the other browser tests."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect

from tests.service.routes.test_dashboard_browser import browser, open_page
from tests.support import ServiceHandle, by_id, finished, submit
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
