"""Rights through every door: docs/api.md's table of rights names every route and tool, and a read-only key walked
over all of them is refused exactly what the table says needs `write` (cancel and delete), with a 403 naming the
right, and nothing of the tenant's is lost. The CLI says so in words."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from service.app import create_app
from service.auth import PUBLIC, PUBLIC_PREFIXES
from tests.service.doors.mcp.wire import call_tool, cancel_task, rpc
from tests.support import cli, finished, running_service, submit

WRITER, READER = "mcpb_writer-key", "mcpb_reader-key"
ECHO = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}
SLOW = {"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}
API_DOC = Path(__file__).parents[2] / "docs" / "api.md"
REFUSED = "needs the 'write' right"


def rights_table() -> dict[str, str]:
    """docs/api.md's table of rights: each route or tool its first column names -> its right."""
    section = API_DOC.read_text().split("### Rights: who may do what", 1)[1]
    rows = {}
    for line in section.split("\n| route or tool | right |\n|---|---|\n", 1)[1].split("\n\n", 1)[0].splitlines():
        named, right = (cell.strip() for cell in line.strip("|").split("|"))
        names = re.findall(r"`([^`]+)`", named)
        rows |= dict.fromkeys(names[:1] if named.startswith("`POST /mcp/tools/call`") else names, right)
    return rows


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    keys = [
        {"sha256": hash_key(WRITER), "tenant": "acme", "write": True},
        {"sha256": hash_key(READER), "tenant": "acme"},
    ]
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    return settings.model_copy(update={"auth": "keys", "keys": path})


@pytest.fixture
async def base_url(keyed: Settings) -> AsyncIterator[str]:
    async with running_service(keyed) as service:
        yield service.base_url


def as_(base_url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_the_rights_table_names_every_keyed_route_and_every_tool(keyed: Settings) -> None:
    table = rights_table()
    app = create_app(keyed)
    keyed_routes = {
        f"{method} {route.path.replace('{batch_id}', '{id}').replace(':item_path', '')}"
        for route in app.state.routes
        if isinstance(route, APIRoute) and route.path not in PUBLIC and not route.path.startswith(PUBLIC_PREFIXES)
        for method in route.methods
    }
    assert len(keyed_routes) >= 16 and keyed_routes - set(table) == set()
    tools = {
        "call_tools_batch",
        "submit_batch",
        "get_batch",
        "get_item",
        "list_batches",
        "list_servers",
        "delete_batch",
    }
    assert tools | {"tasks/get", "tasks/cancel", "tasks/update", "subscriptions/listen"} <= set(table)
    needs_write = {name for name, right in table.items() if right == "`write`"}
    assert needs_write == {"POST /v1/batches/{id}/cancel", "DELETE /v1/batches/{id}", "delete_batch", "tasks/cancel"}


async def test_a_read_only_key_walks_every_route_and_is_refused_only_cancel_and_delete(base_url: str) -> None:
    async with as_(base_url, WRITER) as writer, as_(base_url, READER) as reader:
        ended = await submit(writer, [ECHO])
        await finished(writer, ended["id"])
        running = await submit(writer, [SLOW])
        batch = ended["id"]
        walk = [
            ("POST", "/v1/batches", {"calls": [ECHO]}),
            ("POST", "/v1/batches:validate", {"calls": [ECHO]}),
            ("GET", "/v1/batches", None),
            ("GET", f"/v1/batches/{batch}", None),
            ("GET", f"/v1/batches/{batch}/items/0", None),
            ("GET", f"/v1/batches/{batch}/results", None),
            ("GET", f"/v1/batches/{batch}/events", None),
            ("GET", f"/v1/batches/{batch}/questions", None),
            ("POST", f"/v1/batches/{batch}/items/0/input", {"action": "decline"}),
            ("POST", f"/v1/batches/{batch}/retry", {}),
            ("GET", "/v1/recent-items", None),
            ("GET", "/v1/servers", None),
            ("GET", "/v1/overview", None),
            ("POST", "/mcp/tools/call", {"calls": [{"server_id": "demo_http", "tool_name": "echo", "arguments": {}}]}),
        ]
        for method, path, body in walk:
            response = await reader.request(method, path, json=body)
            assert response.status_code in (200, 202, 409), (method, path, response.text)
        for method, path in [("POST", f"/v1/batches/{running['id']}/cancel"), ("DELETE", f"/v1/batches/{batch}")]:
            response = await reader.request(method, path)
            assert response.status_code == 403, (method, path, response.text)
            assert REFUSED in response.json()["detail"][0]["msg"]
        assert (await reader.get(f"/v1/batches/{batch}")).status_code == 200  # nothing was lost
        assert (await reader.get(f"/v1/batches/{running['id']}", params={"limit": 0})).json()["status"] == "running"
        assert (await writer.post(f"/v1/batches/{running['id']}/cancel")).status_code == 200
        assert (await writer.delete(f"/v1/batches/{batch}")).status_code == 204


async def test_a_read_only_key_on_the_mcp_door_may_read_and_submit_but_not_delete_or_cancel(base_url: str) -> None:
    async with as_(base_url, WRITER) as writer, as_(base_url, READER) as reader:
        ended = await submit(writer, [ECHO])
        await finished(writer, ended["id"])
        running = await submit(writer, [SLOW])
        batch = ended["id"]
        for tool, arguments in [
            ("submit_batch", {"calls": [ECHO]}),
            ("call_tools_batch", {"calls": [ECHO], "wait_seconds": 0}),
            ("get_batch", {"batch_id": batch}),
            ("get_item", {"batch_id": batch, "item_id": "0"}),
            ("list_batches", {}),
            ("list_servers", {}),
        ]:
            result = (await call_tool(reader, tool, arguments, tasks=False)).result
            assert not result.get("isError"), (tool, result)
        assert (await rpc(reader, "tasks/get", {"taskId": batch}, name=batch)).result["status"] == "completed"

        refused = (await call_tool(reader, "delete_batch", {"batch_id": batch}, tasks=False)).result
        assert refused["isError"] and REFUSED in refused["content"][0]["text"]
        cancel = await cancel_task(reader, running["id"])
        assert cancel.error["code"] == -32602 and REFUSED in cancel.error["message"]
        assert (await reader.get(f"/v1/batches/{batch}")).status_code == 200
        assert (await reader.get(f"/v1/batches/{running['id']}", params={"limit": 0})).json()["status"] == "running"
        assert (await cancel_task(writer, running["id"])).result["resultType"] == "complete"
        deleted = (await call_tool(writer, "delete_batch", {"batch_id": batch}, tasks=False)).result
        assert deleted["structuredContent"] == {"id": batch, "deleted": True}


async def test_the_cli_says_a_read_only_key_may_not_delete_or_cancel(
    base_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with as_(base_url, WRITER) as writer:
        ended = await submit(writer, [ECHO])
        await finished(writer, ended["id"])
        running = await submit(writer, [SLOW])
        monkeypatch.setenv("MCP_BATCH_API_KEY", READER)
        for verb, batch in [("delete", ended["id"]), ("cancel", running["id"])]:
            assert await cli(verb, batch, "--server-url", base_url) == 1
            err = capsys.readouterr().err
            assert f"this key may not {verb} batch {batch!r}" in err and REFUSED in err and "--write" in err
        assert (await writer.post(f"/v1/batches/{running['id']}/cancel")).status_code == 200
