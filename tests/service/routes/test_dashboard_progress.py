"""The dashboard's running rows in a real browser (Debian's chromium through Playwright): a small bar of what the
item's backend last reported, moved by the event stream, gone once the item finishes. The backend is
server-everything's `trigger-long-running-operation` over stdio."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, async_playwright, expect

from tests.service.routes.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS, HAVE_CHROMIUM, open_page, show_batch
from tests.support import ServiceHandle, finished, submit
from tests.third_party import everything_stdio

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


@pytest.fixture
async def chromium() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        message = f"{CHROMIUM} is missing: install the Debian package chromium (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


async def test_a_running_row_shows_its_backends_progress_as_a_bar_until_it_ends(
    service: ServiceHandle, client: httpx.AsyncClient, chromium: Browser
) -> None:
    page, problems = await open_page(chromium)
    call = {"id": "long", "server": "everything", "tool": "trigger-long-running-operation"}
    batch = await submit(client, [{**call, "arguments": {"duration": 8, "steps": 8}}])
    await show_batch(page, service.base_url, batch["id"])
    bar = page.locator('#items tbody tr[data-status="running"] .item-progress')
    await expect(bar).to_have_attribute("max", "8", timeout=20_000)
    first = await bar.get_attribute("value") or ""
    await expect(bar).not_to_have_attribute("value", first, timeout=10_000)  # the event stream moves it
    assert " of 8" in (await bar.get_attribute("title") or "")
    await finished(client, batch["id"])
    await expect(page.locator('#items tbody tr[data-status="ok"]')).to_have_count(1, timeout=15_000)
    await expect(page.locator(".item-progress")).to_have_count(0)
    assert problems == []
