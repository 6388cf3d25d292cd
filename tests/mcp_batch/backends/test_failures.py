"""A backend that cannot be reached says why in words, on the item and in the server listing: the root cause out of
the SDK's exception groups, never a header or env value. Through the real API and worker, against real processes,
ports and server-everything (which nobody here wrote)."""

from __future__ import annotations

import sys
from typing import Any

import httpx
import pytest

from tests.ports import free_port
from tests.support import HttpBackendProcess, run_batch, start_http_backend
from tests.third_party import everything_command

pytestmark = pytest.mark.timeout(90)

ENV_VALUE = "env-value-never-shown-5521"
DIES = "import os, sys; print('bad config, token', os.environ['TOKEN'], file=sys.stderr); sys.exit(3)"


@pytest.fixture(scope="module")
def locked() -> Any:
    backend: HttpBackendProcess = start_http_backend(extra_args=["--require-token", "right"])
    yield backend
    backend.stop()


@pytest.fixture
def servers(servers: dict[str, Any], locked: HttpBackendProcess) -> dict[str, Any]:
    servers.update(
        missing={"command": "mcp-server-that-is-not-installed", "args": ["--token", "an-argument"]},
        refused={"url": f"http://127.0.0.1:{free_port()}/mcp?token=in-the-url"},
        dies={"command": sys.executable, "args": ["-c", DIES], "env": {"TOKEN": ENV_VALUE}},
        locked={"url": locked.url, "headers": {"Authorization": "Bearer wrong-header-value"}},
        everything_bad={"command": everything_command(), "args": ["bogus"]},
    )
    return servers


async def failures(client: httpx.AsyncClient) -> tuple[dict[str, str], dict[str, str]]:
    """Each failing backend's item error message, and its tools_error in GET /v1/servers."""
    names = ["missing", "refused", "dies", "locked", "everything_bad"]
    document = await run_batch(client, [{"id": n, "server": n, "tool": "echo"} for n in names])
    items = {item["id"]: item["error"]["message"] for item in document["results"]}
    listed = (await client.get("/v1/servers")).json()
    listing = {server["name"]: server["tools_error"] for server in listed if server["name"] in names}
    return items, listing


async def test_each_failure_says_its_root_cause_in_words(client: httpx.AsyncClient) -> None:
    items, listing = await failures(client)
    port = items["refused"].rsplit(":", 1)[-1]
    expected = {
        "missing": "command not found: mcp-server-that-is-not-installed",
        "refused": f"connection refused at 127.0.0.1:{port}",
        "dies": "the stdio server exited with code 3 while opening the session "
        "(last stderr line: bad config, token ***)",
        "locked": "the backend answered HTTP 401 while opening the session: it refused the credentials",
        "everything_bad": "the stdio server exited with code 1 while opening the session "
        "(last stderr line: Unknown transport: bogus)",
    }
    for name, said in expected.items():
        assert items[name] == f"could not open a session to {name!r}: {said}", name
        assert listing[name] == f"could not list tools: {said}", name
    everything = " ".join([*items.values(), *listing.values()])
    for never in (ENV_VALUE, "wrong-header-value", "in-the-url", "an-argument", "Group"):
        assert never not in everything
