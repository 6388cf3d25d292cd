"""The dashboard's credentials page in a real browser (Debian's chromium, driven by Playwright) against the real API:
a tenant sets a secret for a backend that takes its own, sees it listed (never its value), deletes it after
confirming, and follows the connect link of an OAuth backend to its authorization server (a real one); the backends
view links a backend the tenant has not connected to that page. Skips without chromium, as the other browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect

from mcp_batch.settings import Settings
from tests.oauth_flow import ALPHA, as_, oauth_backend, oauth_settings
from tests.service.routes.test_dashboard_browser import browser, open_page
from tests.support import running_api

pytestmark = pytest.mark.timeout(60)

__all__ = ["browser"]  # the fixture, shared with the dashboard's other browser tests

SECRET = "tok-browser-SEKRET-3e7a"


async def test_a_tenant_sets_lists_and_deletes_a_secret_and_follows_an_oauth_backends_connect_link(
    settings: Settings, servers: dict[str, Any], tmp_path: Path, browser: Browser
) -> None:
    with oauth_backend() as guarded:
        backends = {
            "guarded": {"url": guarded.url, "auth": {"type": "oauth"}},
            "who": {"url": servers["demo_http"]["url"], "auth": {"type": "tenant"}},
        }
        async with running_api(oauth_settings(settings, tmp_path, backends)) as base_url, as_(base_url, ALPHA) as api:
            page, problems = await open_page(browser)
            await page.goto(f"{base_url}/ui/")
            await page.fill("#api-key", ALPHA)
            await page.click("#key-submit")
            await page.goto(f"{base_url}/ui/#/backends")
            guarded_row = page.locator('#servers tr[data-server="guarded"]')
            await expect(guarded_row.locator('[data-field="tools"] a')).to_have_text("connect")

            await page.goto(f"{base_url}/ui/#/credentials")
            await expect(page.locator("#credential-server option")).to_have_text(["who"])
            await page.fill("#credential-secret", SECRET)
            await page.click("#credential-save")
            row = page.locator('#credentials tr[data-server="who"]')
            await expect(row.locator("td").nth(1)).to_have_text("secret")
            assert await page.input_value("#credential-secret") == ""
            assert SECRET not in await page.content()
            assert [c["server"] for c in (await api.get("/v1/credentials")).json()] == ["who"]

            await row.get_by_role("button", name="Delete").click()
            await expect(page.locator("#confirm-text")).to_contain_text("who")
            await page.click("#confirm-ok")
            await expect(row).to_have_count(0)
            assert (await api.get("/v1/credentials")).json() == []

            link = page.locator('#credential-connects li[data-server="guarded"] a')
            await expect(link).to_have_text("Connect guarded")
            async with page.expect_request(lambda r: r.url.startswith(guarded.issuer)) as asked:
                await link.click()
            sent = (await asked.value).url
            assert "code_challenge=" in sent and httpx.URL(sent).params["resource"] == guarded.url
            assert problems == []
