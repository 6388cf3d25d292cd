"""A task whose call waits on its tenant connecting an OAuth backend (worker/connect_wait.py): the task goes
`input_required` with a URL-mode elicitation naming a link that starts the connect; the browser opens it, logs in and
consents at the authorization server, comes back to the callback; `tasks/update` accepts, and the call runs as the
tenant's account. A declined one ends `unauthenticated`; a link that is not genuine is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.oauth_flow import (
    ALPHA,
    PUBLIC_URL,
    OAuthBackend,
    as_,
    authorize,
    follow_to_service,
    oauth_backend,
    oauth_settings,
)
from tests.service.doors.mcp.wire import call_tool, get_task, rpc
from tests.support import eventually, finished, running_service

pytestmark = pytest.mark.timeout(120)

WHOAMI = {"server": "guarded", "tool": "whoami", "arguments": {}}


@pytest.fixture(scope="module")
def guarded() -> Iterator[OAuthBackend]:
    with oauth_backend() as backend:
        yield backend


@pytest.fixture
async def base_url(settings: Settings, tmp_path: Path, guarded: OAuthBackend) -> AsyncIterator[str]:
    oauth = oauth_settings(settings, tmp_path, {"guarded": {"url": guarded.url, "auth": {"type": "oauth"}}})
    async with running_service(oauth.model_copy(update={"mcp_task_wait_seconds": 0.5})) as service:
        yield service.base_url


async def asking(http: httpx.AsyncClient, task_id: str) -> tuple[str, dict[str, Any]]:
    async def waiting() -> dict[str, Any] | None:
        task = (await get_task(http, task_id)).result
        return task if task["status"] == "input_required" else None

    ((key, request),) = (await eventually(waiting, what="the task asks", timeout=60))["inputRequests"].items()
    return key, request


async def test_a_task_waiting_on_a_connection_asks_with_a_url_and_runs_once_connected(base_url: str) -> None:
    async with as_(base_url, ALPHA) as alpha:
        task_id = (await call_tool(alpha, "call_tools_batch", {"calls": [WHOAMI]})).result["taskId"]
        key, request = await asking(alpha, task_id)
        params = request["params"]
        assert request["method"] == "elicitation/create" and params["mode"] == "url"
        assert params["url"].startswith(f"{PUBLIC_URL}/v1/oauth/start?ticket=") and "guarded" in params["message"]
        started = await follow_to_service(base_url, params["url"])
        assert started.status_code == 302, started.text
        connected = await follow_to_service(base_url, await authorize(started.headers["location"], "alice"))
        assert connected.status_code == 200, connected.text
        accept = {"taskId": task_id, "inputResponses": {key: {"action": "accept"}}}
        assert (await rpc(alpha, "tasks/update", accept, name=task_id)).result["resultType"] == "complete"
        await finished(alpha, task_id)
        done = (await get_task(alpha, task_id)).result
    item = done["result"]["structuredContent"]["results"][0]
    assert item["status"] == "ok" and item["content"][0]["text"] == "alice"


async def test_a_declined_connection_ends_the_call_unauthenticated(base_url: str) -> None:
    async with as_(base_url, ALPHA) as alpha:
        task_id = (await call_tool(alpha, "call_tools_batch", {"calls": [WHOAMI]})).result["taskId"]
        key, _ = await asking(alpha, task_id)
        decline = {"taskId": task_id, "inputResponses": {key: {"action": "decline"}}}
        await rpc(alpha, "tasks/update", decline, name=task_id)
        await finished(alpha, task_id)
        done = (await get_task(alpha, task_id)).result
    item = done["result"]["structuredContent"]["results"][0]
    assert item["status"] == "unauthenticated"
    assert item["error"]["details"]["connect"] == "POST /v1/credentials/guarded/connect"


async def test_a_start_link_that_is_not_genuine_is_refused(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as browser:
        page = await browser.get("/v1/oauth/start", params={"ticket": "e30.forged"})
    assert page.status_code == 403 and "not genuine or has expired" in page.text
