"""Failure shows in the dashboard's lists, in a real browser (Debian's chromium through Playwright): a batch that
ended with failures is badged with them in the list and on its page, and every bar shows ok, failed and not run
apart, so a cancelled batch's bar shows what was done rather than a full bar. A screenshot of each view is saved in
the test's artefacts (MCP_BATCH_TEST_ARTIFACTS, else its tmp_path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Locator, expect

from tests.service.routes.test_dashboard_browser import (  # noqa: F401 (its fixtures)
    artifacts,
    browser,
    open_page,
    screenshot,
    show_batch,
)
from tests.support import ServiceHandle, finished, run_batch, submit

pytestmark = pytest.mark.timeout(60)

ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}
FAIL = {"server": "demo_http", "tool": "fail"}


async def parts(bar: Locator) -> dict[str, str]:
    """What the bar draws: its data, and the share of its width each part takes."""
    found: dict[str, Any] = await bar.evaluate(
        """(bar) => ({
            ...bar.dataset,
            widths: [...bar.children].map((part) => Math.round(part.getBoundingClientRect().width)),
        })"""
    )
    return found


async def test_the_list_and_the_page_show_failures_and_what_a_cancelled_batch_did(
    service: ServiceHandle,
    client: httpx.AsyncClient,
    browser: Browser,  # noqa: F811
    artifacts: Path,  # noqa: F811
) -> None:
    clean = (await run_batch(client, [ECHO, ECHO]))["id"]
    failing = (await run_batch(client, [ECHO, ECHO, ECHO, FAIL]))["id"]
    stuck = await submit(client, [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}] * 2)
    await client.post(f"/v1/batches/{stuck['id']}/cancel")
    assert (await finished(client, stuck["id"]))["status"] == "cancelled"

    page, problems = await open_page(browser)
    await page.goto(f"{service.base_url}/ui")
    row = page.locator(f'#batches tr[data-id="{failing}"]')
    await expect(row.locator(".status")).to_have_text("completed, 1 failed")
    await expect(row.locator(".status")).to_have_class("status s-completed has-failures")
    await expect(page.locator(f'#batches tr[data-id="{clean}"] .status')).to_have_text("completed")
    await expect(row).to_contain_text("3 ok, 1 failed")
    failed_bar = await parts(row.locator(".outcome"))
    assert (failed_bar["ok"], failed_bar["failed"], failed_bar["notRun"], failed_bar["left"]) == ("3", "1", "0", "0")
    ok_width, failed_width, _, _ = failed_bar["widths"]
    assert failed_width > 0 and ok_width > 2 * failed_width  # three parts in four ok, one failed, drawn so
    cancelled_row = page.locator(f'#batches tr[data-id="{stuck["id"]}"]')
    await expect(cancelled_row).to_contain_text("0 ok, 2 not run")
    cancelled_bar = await parts(cancelled_row.locator(".outcome"))
    assert (cancelled_bar["ok"], cancelled_bar["notRun"]) == ("0", "2") and cancelled_bar["widths"][0] == 0
    await screenshot(page, artifacts, "batches-with-failures.png")

    await show_batch(page, service.base_url, failing)
    await expect(page.locator("#batch-status")).to_have_text("completed, 1 failed")
    await expect(page.locator("#batch-percent")).to_have_text("4 of 4 ended: 3 ok, 1 failed, 0 not run")
    await show_batch(page, service.base_url, stuck["id"])
    await expect(page.locator("#batch-status")).to_have_text("cancelled")
    await expect(page.locator("#batch-percent")).to_have_text("2 of 2 ended: 0 ok, 0 failed, 2 not run")
    page_bar = await parts(page.locator("#batch-progress"))
    assert page_bar["ok"] == "0" and page_bar["widths"][0] == 0 and page_bar["widths"][2] > 0
    await screenshot(page, artifacts, "cancelled-batch.png")
    assert problems == []
