"""The dashboard at /ui in a real browser: Debian's chromium, driven by Playwright, against the real API and worker
and the demo backend over stdio and HTTP. Batches are submitted through REST, as a client would, and followed on the
page: progress and counts from the event stream without a reload, the failed items, one item whole, cancel, retry,
delete, the results' download, the backends, keys and tenants, a phone's width. A screenshot of the batch page is
saved per run (MCP_BATCH_TEST_ARTIFACTS, else the test's tmp_path).

Without /usr/bin/chromium these tests skip (install the Debian package `chromium`), except in CI, where they fail.
`MCP_BATCH_TEST_DASHBOARD_SCALE=1` adds the load time of a 100,000-item batch and a screenshot of a 1,000-item one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from service.routes.dashboard import CONTENT_SECURITY_POLICY, UI_DIR
from tests.support import ServiceHandle, finished, running_service, submit

pytestmark = pytest.mark.timeout(60)

CHROMIUM = Path("/usr/bin/chromium")
HAVE_CHROMIUM = CHROMIUM.exists()
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
ALPHA, BETA, READER = "mcpb_alpha-key", "mcpb_beta-key", "mcpb_reader-key"
FAIL_MESSAGE = "this tool always fails"  # the tool's own words, in error.message


def calls(n: int, seconds: float = 0.05, fail_every: int = 0) -> list[dict[str, Any]]:
    """`n` calls alternating between the stdio and the HTTP backend; every `fail_every`-th one fails."""
    out = []
    for i in range(n):
        server = "demo" if i % 2 == 0 else "demo_http"
        if fail_every and i % fail_every == fail_every - 1:
            out.append({"id": f"c{i}", "server": server, "tool": "fail"})
        else:
            out.append({"id": f"c{i}", "server": server, "tool": "sleep", "arguments": {"seconds": seconds}})
    return out


@pytest.fixture
def servers(servers: dict[str, Any]) -> dict[str, Any]:
    """The HTTP backend with limits, so the backends view has some to show."""
    servers["demo_http"] = servers["demo_http"] | {"max_concurrency": 4, "rate_limit": {"per_second": 500, "burst": 50}}
    return servers


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"cancel_grace_seconds": 0.5})  # a cancelled call is cut at once


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("MCP_BATCH_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def screenshot(page: Page, folder: Path, name: str) -> Path:
    path = folder / name
    await page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        message = f"{CHROMIUM} is missing: install the Debian package chromium (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


async def open_page(browser: Browser, viewport: dict[str, int] = LAPTOP) -> tuple[Page, list[str]]:
    """A page in a fresh browser session, and the list its script errors and policy violations are added to."""
    context = await browser.new_context(viewport=viewport, accept_downloads=True)  # type: ignore[arg-type]
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on(
        "console",
        lambda message: problems.append(message.text) if "Content Security Policy" in message.text else None,
    )
    return page, problems


async def show_batch(page: Page, base_url: str, batch_id: str) -> None:
    await page.goto(f"{base_url}/ui/#/batch/{batch_id}")
    await expect(page.locator("#items tbody tr").first).to_be_visible()


async def counts(page: Page) -> dict[str, str]:
    cells = page.locator("#counts dd")
    return {await cell.get_attribute("data-count") or "": await cell.inner_text() for cell in await cells.all()}


async def test_a_batch_is_followed_to_its_end_then_filtered_opened_downloaded_and_retried(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser, artifacts: Path
) -> None:
    page, problems = await open_page(browser)
    await page.goto(f"{service.base_url}/ui")
    await expect(page.locator("#batches")).to_contain_text("No batches yet.")

    batch = await submit(client, calls(30, seconds=0.2, fail_every=6), max_concurrency=2)  # about 2.5 s
    row = page.locator(f'#batches tr[data-id="{batch["id"]}"]')
    await expect(row).to_be_visible()  # the list refreshes by itself
    await row.locator("a").first.click()
    await expect(page.locator("#batch-status")).to_have_text("running")
    await page.evaluate("() => { window.notReloaded = true; }")

    await expect(page.locator("#batch-status")).to_have_text("completed, 5 failed", timeout=30_000)
    final = await finished(client, batch["id"])
    assert await page.evaluate("() => window.notReloaded === true")  # it moved with the stream, not a reload
    bar = page.locator("#batch-progress")
    assert await bar.evaluate("(bar) => [bar.dataset.ok, bar.dataset.failed, bar.dataset.left]") == ["25", "5", "0"]
    shown = await counts(page)
    assert (shown["total"], shown["succeeded"], shown["failed"]) == ("30", "25", "5")
    assert final["counts"]["failed"] == 5
    await expect(page.locator('#items tbody tr[data-status="running"]')).to_have_count(0)
    await screenshot(page, artifacts, "batch-page.png")

    await page.select_option("#item-filter", "failed")
    await expect(page.locator("#items-where")).to_have_text("1\u20135 of 5")
    rows = page.locator("#items tbody tr")
    assert await rows.evaluate_all("(rows) => rows.map((r) => r.dataset.status)") == ["error"] * 5
    assert await rows.evaluate_all("(rows) => rows.map((r) => r.dataset.index)") == ["5", "11", "17", "23", "29"]
    await rows.nth(1).click()
    panel = page.locator("#item-panel")
    await expect(panel.locator("#panel-title")).to_have_text("Item c11")
    await expect(panel.locator("#panel-error")).to_contain_text(FAIL_MESSAGE)
    await expect(panel.locator("#panel-body")).to_contain_text("this tool always fails")  # the content itself
    await panel.locator("#panel-close").click()
    await expect(panel).to_be_hidden()

    await page.select_option("#item-filter", "all")
    await page.check("#failed-first")
    await expect(page.locator("#items tbody tr").nth(5)).to_have_attribute("data-index", "0")
    first = await page.locator("#items tbody tr").evaluate_all(
        "(rows) => rows.slice(0, 6).map((r) => r.dataset.status)"
    )
    assert first == ["error"] * 5 + ["ok"]

    async with page.expect_download() as download_info:
        await page.click("#download")
    download = await download_info.value
    lines = (await asyncio.to_thread(Path(await download.path()).read_text)).splitlines()
    assert download.suggested_filename == f"{batch['id']}.jsonl"
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(f"c{i}" for i in range(30))

    await page.click("#retry")
    await expect(page.locator("#confirm")).to_be_visible()
    await expect(page.locator("#confirm-text")).to_contain_text("5 items")
    await page.click("#confirm-ok")
    await expect(page.locator("#retry-of")).to_have_text(batch["id"], timeout=10_000)
    await expect(page.locator("#batch-status")).to_have_text("completed, 5 failed", timeout=30_000)  # fail again
    assert (await counts(page))["total"] == "5"
    retry_id = page.url.rsplit("/", 1)[1]
    assert (await finished(client, retry_id))["retry_of"] == batch["id"]

    await page.goto(f"{service.base_url}/ui/#/batches?limit=1")
    await expect(page.locator("#batches tbody tr")).to_have_attribute("data-id", retry_id)  # newest first
    await page.click("#older")
    await expect(page.locator("#batches tbody tr")).to_have_attribute("data-id", batch["id"])
    await page.goto(f"{service.base_url}/ui/#/batches")
    await page.select_option("#batch-filter", "running")
    await expect(page.locator("#batches")).to_contain_text("No running batches.")
    assert problems == []


async def test_a_running_batch_is_cancelled_from_the_page(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser
) -> None:
    page, problems = await open_page(browser)
    batch = await submit(client, calls(20, seconds=20), max_concurrency=2)
    await show_batch(page, service.base_url, batch["id"])
    await expect(page.locator('#items tbody tr[data-status="running"]')).to_have_count(2, timeout=15_000)

    await page.click("#cancel")
    await expect(page.locator("#confirm-text")).to_contain_text("Cancel this batch?")
    await page.click("#confirm-no")  # asked, and not done
    await expect(page.locator("#confirm")).to_be_hidden()
    assert (await client.get(f"/v1/batches/{batch['id']}", params={"limit": 0})).json()["status"] == "running"

    await page.click("#cancel")
    await page.click("#confirm-ok")
    await expect(page.locator("#batch-status")).to_have_text("cancelled", timeout=15_000)
    assert (await finished(client, batch["id"]))["status"] == "cancelled"
    assert (await counts(page))["cancelled"] == "20"
    await expect(page.locator("#cancel")).to_be_hidden()
    await expect(page.locator('#items tbody tr[data-status="cancelled"]')).to_have_count(20)
    assert problems == []


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    keys = [{"sha256": hash_key(key), "tenant": tenant, "write": True} for key, tenant in [(ALPHA, "a"), (BETA, "b")]]
    keys.append({"sha256": hash_key(READER), "tenant": "a"})  # tenant a's read-only key
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return settings.model_copy(update={"auth": "keys", "keys": path})


async def test_with_keys_the_page_asks_for_one_refuses_a_wrong_one_and_hides_other_tenants(
    keyed: Settings, browser: Browser
) -> None:
    async with (
        running_service(keyed) as service,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {ALPHA}"}) as alpha,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {BETA}"}) as beta,
    ):
        page, problems = await open_page(browser)
        streams: list[str | None] = []
        page.on("request", lambda r: streams.append(r.headers.get("authorization")) if "/events" in r.url else None)
        await page.goto(f"{service.base_url}/ui/")
        await expect(page.locator("#key-message")).to_have_text("This service needs an API key.")

        await page.fill("#api-key", "mcpb_not-a-key")
        await page.click("#key-submit")
        await expect(page.locator("#key-message")).to_have_text("The API key was refused.")

        await page.fill("#api-key", ALPHA)
        await page.click("#key-submit")
        await expect(page.locator("#batches")).to_contain_text("No batches yet.")
        mine = await submit(alpha, calls(12, seconds=0.1), max_concurrency=2)
        theirs = await submit(beta, calls(2))
        await show_batch(page, service.base_url, mine["id"])
        await expect(page.locator("#batch-status")).to_have_text("completed", timeout=30_000)
        assert (await counts(page))["succeeded"] == "12"
        assert streams and set(streams) == {f"Bearer {ALPHA}"}  # the event stream carried the key

        await page.goto(f"{service.base_url}/ui/#/batch/{theirs['id']}")
        await expect(page.locator("#not-found h1")).to_have_text("Batch not found")
        await page.goto(f"{service.base_url}/ui/#/batches")
        await expect(page.locator("#batches tbody tr")).to_have_count(1)  # only the tenant's own batch

        stored = await page.evaluate("() => [sessionStorage.length, localStorage.length, document.cookie]")
        assert stored == [1, 0, ""]  # the key lives in this tab's session only
        fresh, _ = await open_page(browser)
        await fresh.goto(f"{service.base_url}/ui/")
        await expect(fresh.locator("#key-form")).to_be_visible()
        assert problems == []


async def test_a_read_only_key_is_refused_delete_and_cancel_on_the_page_which_says_why(
    keyed: Settings, browser: Browser
) -> None:
    async with (
        running_service(keyed) as service,
        httpx.AsyncClient(base_url=service.base_url, headers={"Authorization": f"Bearer {ALPHA}"}) as alpha,
    ):
        ended = await submit(alpha, calls(1))
        await finished(alpha, ended["id"])
        running = await submit(alpha, calls(2, seconds=20))
        page, problems = await open_page(browser)
        await page.goto(f"{service.base_url}/ui/")
        await page.fill("#api-key", READER)
        await page.click("#key-submit")

        await show_batch(page, service.base_url, ended["id"])
        await page.click("#delete")
        await page.click("#confirm-ok")
        await expect(page.locator("#notice")).to_contain_text("Not allowed for this API key")
        await expect(page.locator("#notice")).to_contain_text("'write' right")
        await expect(page.locator("#delete")).to_be_disabled()
        assert (await alpha.get(f"/v1/batches/{ended['id']}")).status_code == 200

        await show_batch(page, service.base_url, running["id"])
        await page.click("#cancel")
        await page.click("#confirm-ok")
        await expect(page.locator("#cancel")).to_be_disabled()
        await expect(page.locator("#notice")).to_contain_text("cancelling a batch needs the 'write' right")
        assert (await alpha.get(f"/v1/batches/{running['id']}", params={"limit": 0})).json()["status"] != "cancelled"
        await alpha.post(f"/v1/batches/{running['id']}/cancel")
        assert problems == []


async def test_the_backends_view_shows_limits_use_waits_and_workers(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser
) -> None:
    await finished(client, (await submit(client, calls(20, seconds=0.01)))["id"])
    page, problems = await open_page(browser)
    await page.goto(f"{service.base_url}/ui/#/backends")
    http_row = page.locator('#servers tr[data-server="demo_http"]')
    await expect(http_row.locator('[data-field="in-flight"]')).to_have_text("0 / 4")
    await expect(http_row.locator('[data-field="rate"]')).to_have_text("500/s, burst 50")
    await expect(page.locator('#service-state [data-count="workers"]')).to_have_text("1")
    await expect(page.locator('#service-state [data-count="ready"]')).to_have_text("yes")
    await expect(page.locator('#waits tr[data-server="demo_http"] td').nth(1)).to_have_text("10")
    await expect(page.locator("#workers tbody tr")).to_have_count(1)
    assert problems == []


async def test_at_a_phone_width_the_page_fits_and_the_panel_takes_the_screen(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser, artifacts: Path
) -> None:
    batch = await finished(client, (await submit(client, calls(12, fail_every=4)))["id"])
    page, problems = await open_page(browser, PHONE)
    await show_batch(page, service.base_url, batch["id"])
    await expect(page.locator("#batch-status")).to_have_text("completed, 3 failed")
    widths = await page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], widths  # nothing but the tables' own strips scrolls sideways
    await expect(page.locator("#items th.opt").first).to_be_hidden()
    await screenshot(page, artifacts, "batch-page-phone.png")
    await page.locator('#items tbody tr[data-status="error"]').first.click()
    box = await page.locator("#item-panel").bounding_box()
    assert box is not None and box["width"] >= PHONE["width"] - 1
    assert problems == []


async def test_the_files_are_served_with_their_types_and_a_policy_that_allows_no_inline_script(
    client: httpx.AsyncClient,
) -> None:
    redirect = await client.get("/ui")
    assert (redirect.status_code, redirect.headers["location"]) == (307, "ui/")
    page = await client.get("/ui/")
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY
    assert page.headers["x-content-type-options"] == "nosniff"
    html = page.text
    assert re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S) == [(' type="module" src="app.js"', "")]
    assert " style=" not in html and not re.search(r"\son\w+=", html)
    types = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
    for path in sorted(UI_DIR.iterdir()):
        if path.suffix in types:
            response = await client.get(f"/ui/{path.name}")
            assert response.headers["content-type"] == types[path.suffix], path.name
            assert response.content == path.read_bytes()
            again = await client.get(f"/ui/{path.name}", headers={"If-None-Match": response.headers["etag"]})
            assert again.status_code == 304
    for name in ("nope.js", "..%2Fapp.py", "%2e%2e%2fauth.py"):
        assert (await client.get(f"/ui/{name}")).status_code == 404
    scripts = " ".join(p.read_text() for p in UI_DIR.glob("*.js"))
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|eval\(|new Function|document\.write", scripts)


scale = pytest.mark.skipif(
    os.environ.get("MCP_BATCH_TEST_DASHBOARD_SCALE") != "1", reason="set MCP_BATCH_TEST_DASHBOARD_SCALE=1"
)


@scale
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_load_time_of_a_100000_item_batch_and_a_screenshot_of_1000_items_mid_run(
    settings: Settings, browser: Browser, artifacts: Path
) -> None:
    big = settings.model_copy(update={"max_calls_per_batch": 100_000, "max_concurrency_ceiling": 256})
    async with running_service(big) as service, httpx.AsyncClient(base_url=service.base_url, timeout=120) as client:
        page, problems = await open_page(browser)
        batch = await submit(client, calls(1000, seconds=0.05, fail_every=9), max_concurrency=8)
        await show_batch(page, service.base_url, batch["id"])
        await expect(page.locator("#batch-progress")).to_have_attribute(
            "aria-valuenow", re.compile(r"[1-9]\d\d"), timeout=60_000
        )
        await screenshot(page, artifacts, "batch-1000-mid-run.png")
        await client.post(f"/v1/batches/{batch['id']}/cancel")

        echo = [{"server": "demo", "tool": "echo", "arguments": {"message": f"m{i}"}} for i in range(100_000)]
        started = time.perf_counter()
        batch = await submit(client, echo, max_concurrency=32)
        print(f"100,000-item batch submitted in {time.perf_counter() - started:.1f} s")
        running = await first_page_times(page, service.base_url, batch["id"])
        done = (await client.get(f"/v1/batches/{batch['id']}", params={"limit": 0})).json()["counts"]["succeeded"]
        await screenshot(page, artifacts, "batch-100000.png")
        await client.post(f"/v1/batches/{batch['id']}/cancel")
        await finished(client, batch["id"])
        ended = await first_page_times(page, service.base_url, batch["id"])
        # The worst case: every item failed, so every read of the document carries 100,000 failed ids.
        unknown = [{"server": "demo", "tool": "no_such_tool"} for _ in range(100_000)]
        failing = await finished(client, (await submit(client, unknown, max_concurrency=32))["id"], timeout=500)
        all_failed = await first_page_times(page, service.base_url, failing["id"])
        for when, times in [
            (f"running, {done} items done", running),
            ("cancelled", ended),
            ("every item failed", all_failed),
        ]:
            print(
                f"100,000-item batch, {when}: first table page rendered {statistics.median(times):.0f} ms after "
                f"navigation (median of {len(times)}: {', '.join(f'{t:.0f}' for t in times)} ms)"
            )
        await page.context.close()  # before the service stops: no stream left open
        assert problems == []


async def first_page_times(page: Page, base_url: str, batch_id: str, rounds: int = 5) -> list[float]:
    """Milliseconds from navigation start to the first page of the items table, as the page marks it."""
    times = []
    for _ in range(rounds):
        await page.goto("about:blank")
        await show_batch(page, base_url, batch_id)
        mark = "() => performance.getEntriesByName('mcp-batch:first-items')[0].startTime"
        times.append(float(await page.evaluate(mark)))
    return times


async def test_an_ended_batch_is_deleted_from_the_page_after_confirmation(
    service: ServiceHandle, client: httpx.AsyncClient, browser: Browser
) -> None:
    page, problems = await open_page(browser)
    running = await submit(client, calls(2, seconds=20))
    await show_batch(page, service.base_url, running["id"])
    await expect(page.locator("#batch-status")).to_have_text("running", timeout=15_000)
    await expect(page.locator("#delete")).to_be_hidden()  # only an ended batch can be deleted
    await client.post(f"/v1/batches/{running['id']}/cancel")

    batch = await submit(client, calls(2), metadata={"job": "nightly"})
    await finished(client, batch["id"])
    await show_batch(page, service.base_url, batch["id"])
    await expect(page.locator('[data-meta="job"]')).to_have_text("nightly")
    await page.click("#delete")
    await expect(page.locator("#confirm-text")).to_contain_text("Delete this batch?")
    await page.click("#confirm-no")  # asked, and not done
    await expect(page.locator("#confirm")).to_be_hidden()
    assert (await client.get(f"/v1/batches/{batch['id']}")).status_code == 200

    await page.click("#delete")
    await page.click("#confirm-ok")
    await expect(page).to_have_url(re.compile(r"#/batches$"))
    await expect(page.locator(f'#batches tr[data-id="{batch["id"]}"]')).to_have_count(0)
    assert (await client.get(f"/v1/batches/{batch['id']}")).status_code == 404
    assert problems == []
