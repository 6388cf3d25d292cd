"""The dashboard's sign-in at a real identity provider (oidc-provider), in Debian's chromium through Playwright: the
prompt offers "Sign in", the provider's login and consent pages are filled in, and the page comes back signed in as
the user's tenant (authorization code with PKCE, the token kept in the tab's session storage); a key still works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, expect

from mcp_batch.settings import Settings
from service.routes.dashboard import content_security_policy
from tests.oidc_provider import KEY_A, OidcProvider, signed_in_settings
from tests.ports import free_port
from tests.service.routes.test_dashboard_browser import browser, open_page
from tests.support import running_service

pytestmark = pytest.mark.timeout(90)

ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}
__all__ = ["browser"]  # the fixture, shared with the dashboard's other browser tests


@pytest.fixture
async def signing_in(settings: Settings, tmp_path: Path) -> AsyncIterator[tuple[str, OidcProvider]]:
    """The service with a dashboard client at a provider of its own (its redirect URI is this service's /ui/)."""
    port = free_port()
    provider = OidcProvider(tmp_path, redirect_uris=[f"http://127.0.0.1:{port}/ui/"]).start()
    try:
        signed = signed_in_settings(settings, provider, tmp_path, port)
        issuer = signed.oauth_issuers[0].model_copy(update={"dashboard_client_id": "browser"})
        async with running_service(signed.model_copy(update={"oauth_issuers": [issuer]}), port) as service:
            yield service.base_url, provider
    finally:
        provider.stop()


async def test_a_user_signs_in_at_the_provider_and_sees_the_tenants_batches(
    signing_in: tuple[str, OidcProvider], browser: Browser
) -> None:
    base_url, provider = signing_in
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {KEY_A}"}) as tenant_a:
        batch_id = (await tenant_a.post("/v1/batches", json={"calls": [ECHO]})).json()["id"]
    page, problems = await open_page(browser)
    await page.goto(f"{base_url}/ui/")
    await expect(page.locator("#key-form")).to_be_visible()  # a key is still asked for, beside the sign-in
    await page.locator("#sign-in").click()
    await page.wait_for_url(f"{provider.issuer}/**")
    await page.fill('input[name="login"]', "alice@a")
    await page.fill('input[name="password"]', "any")
    await page.locator('button[type="submit"]').click()
    await page.locator('button[type="submit"]').click()  # the consent page
    await page.wait_for_url(f"{base_url}/ui/**")
    await expect(page.locator(f'#batches tr[data-id="{batch_id}"]')).to_be_visible()
    assert "code=" not in page.url  # the code is taken off the address once used
    token = await page.evaluate("() => sessionStorage.getItem('mcp-batch-key')")
    assert token and token.count(".") == 2  # the access token, kept for this tab only
    response = await page.request.get(f"{base_url}/ui/")
    assert response.headers["content-security-policy"] == content_security_policy((provider.issuer,))
    assert problems == []


async def test_without_a_dashboard_client_the_page_asks_for_a_key_only(
    settings: Settings, oidc: OidcProvider, tmp_path: Path, browser: Browser
) -> None:
    port = free_port()
    async with running_service(signed_in_settings(settings, oidc, tmp_path, port), port) as service:
        page, problems = await open_page(browser)
        await page.goto(f"{service.base_url}/ui/")
        await expect(page.locator("#key-form")).to_be_visible()
        await page.fill("#api-key", KEY_A)
        await page.locator("#key-submit").click()
        await expect(page.locator("#batches")).to_be_visible()
        assert await page.locator("#sign-in").count() == 0
    assert problems == []
