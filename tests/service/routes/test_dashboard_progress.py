"""The dashboard's running rows in a real browser (Debian's chromium through Playwright): a small bar of what the
item's backend last reported, moved by the event stream, gone once the item finishes. The backend is
server-everything's `trigger-long-running-operation` over stdio."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect

from tests.service.routes.test_dashboard_browser import browser, open_page, show_batch  # noqa: F401 (its fixture)
from tests.support import ServiceHandle, finished, submit
from tests.third_party import everything_stdio

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    servers["everything"] = everything_stdio()
    return servers


async def test_a_running_row_shows_its_backends_progress_as_a_bar_until_it_ends(
    service: ServiceHandle,
    client: httpx.AsyncClient,
    browser: Browser,  # noqa: F811
) -> None:
    page, problems = await open_page(browser)
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
