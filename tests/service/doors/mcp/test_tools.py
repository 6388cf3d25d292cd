"""The MCP door's task inbox, `list_batches`: a tenant's batches newest first, paged, filtered by status, and never
another tenant's (raw JSON-RPC over streamable HTTP, two tenants' keys)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.service.doors.mcp.wire import call_tool
from tests.support import finished, running_service, submit

pytestmark = pytest.mark.timeout(90)

ALPHA, BETA = "mcpb_alpha-key", "mcpb_beta-key"
QUICK = {"server": "demo_http", "tool": "echo", "arguments": {"message": "hi"}}


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    keys = [{"sha256": hash_key(ALPHA), "tenant": "alpha", "write": True}, {"sha256": hash_key(BETA), "tenant": "beta"}]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    return settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json"})


def as_(base_url: str, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


async def test_list_batches_pages_a_tenants_batches_newest_first_by_status(keyed: Settings) -> None:
    async with running_service(keyed) as service, as_(service.base_url, ALPHA) as alpha:
        async with as_(service.base_url, BETA) as beta:
            theirs = (await submit(beta, [QUICK]))["id"]
        mine = [(await submit(alpha, [QUICK]))["id"] for _ in range(3)]
        for batch_id in mine:
            await finished(alpha, batch_id)
        hold = await submit(alpha, [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}])
        await alpha.post(f"/v1/batches/{hold['id']}/cancel")
        await finished(alpha, hold["id"])

        first = (await call_tool(alpha, "list_batches", {"limit": 2}, tasks=False)).result
        page = first["structuredContent"]
        assert [b["id"] for b in page["batches"]] == [hold["id"], mine[2]] and page["next_cursor"]
        assert json.loads(first["content"][0]["text"]) == page
        cursor = page["next_cursor"]
        rest = (await call_tool(alpha, "list_batches", {"limit": 5, "cursor": cursor}, tasks=False)).result
        assert [b["id"] for b in rest["structuredContent"]["batches"]] == [mine[1], mine[0]]
        assert rest["structuredContent"].get("next_cursor") is None
        assert theirs not in str(first) + str(rest)  # another tenant's batch is never listed

        done = (await call_tool(alpha, "list_batches", {"status": ["completed"]}, tasks=False)).result
        assert [b["id"] for b in done["structuredContent"]["batches"]] == mine[::-1]
        summary = done["structuredContent"]["batches"][0]
        assert summary["status"] == "completed" and summary["total"] == summary["finished"] == 1

        bad = (await call_tool(alpha, "list_batches", {"status": ["nope"], "limit": 0}, tasks=False)).result
        assert bad["isError"] is True and "status" in bad["content"][0]["text"] and "limit" in bad["content"][0]["text"]
