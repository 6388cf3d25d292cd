"""The batch tools' annotations as each caller may use them: read-only for a key without `write`, destructive only
on what can write for a key with it (the SDK's `Client`, keys from a keys file)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ToolAnnotations

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.support import ServiceHandle, running_service

READER, WRITER = "mcpb_reader-key", "mcpb_writer-key"


@pytest.fixture
async def service(settings: Settings, tmp_path: Path) -> AsyncIterator[ServiceHandle]:
    keys = [
        {"sha256": hash_key(READER), "tenant": "acme"},
        {"sha256": hash_key(WRITER), "tenant": "acme", "write": True},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    async with running_service(settings.model_copy(update={"auth": "keys", "keys": tmp_path / "keys.json"})) as handle:
        yield handle


async def hints(service: ServiceHandle, key: str) -> dict[str, ToolAnnotations]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(f"{service.base_url}/mcp/", http_client=http)) as client,
    ):
        tools = (await client.list_tools()).tools
    return {tool.name: tool.annotations for tool in tools if tool.annotations is not None}


async def test_a_key_that_may_only_read_sees_the_batch_tools_read_only(service: ServiceHandle) -> None:
    seen = await hints(service, READER)
    for name in ("call_tools_batch", "submit_batch"):
        assert seen[name].read_only_hint is True and seen[name].open_world_hint is True, name
        assert seen[name].destructive_hint is None, name
    assert all(seen[name].read_only_hint for name in ("get_batch", "get_item", "list_batches", "list_servers"))


async def test_a_key_that_may_write_sees_destructive_only_on_what_can_write(service: ServiceHandle) -> None:
    seen = await hints(service, WRITER)
    writers = {name for name, hint in seen.items() if not hint.read_only_hint}
    assert writers == {"call_tools_batch", "submit_batch", "delete_batch"}
    assert all(seen[name].destructive_hint is True for name in writers)
