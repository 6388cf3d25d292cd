"""The MCP door takes bodies up to the service's own ceiling (`MCP_BATCH_MAX_BODY_BYTES`, 10 MiB by default), as
every route does, and past it answers every route's 413: `{"detail": "request body over N bytes"}` in JSON, never the
MCP SDK's own text/plain refusal at its 4 MiB. Over a real socket, at the default ceiling."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.support import ServiceHandle

pytestmark = pytest.mark.timeout(90)

CEILING = Settings.model_fields["max_body_bytes"].default
REFUSAL = {"detail": f"request body over {CEILING} bytes"}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
ROUTES = ["/v1/batches", "/v1/batches:validate", "/v1/batches/0123/retry", "/mcp", "/mcp/", "/mcp/tools/call"]


def ping(size: int) -> bytes:
    """A JSON-RPC ping of `size` bytes (its padding in `_meta`, which a server passes over)."""
    empty = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": ""}}})
    return empty.replace('"pad": ""', '"pad": "' + "x" * (size - len(empty)) + '"').encode()


async def chunks(body: bytes, size: int = 256 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_the_mcp_door_takes_a_body_between_the_sdks_limit_and_the_services(
    service: ServiceHandle, framing: str
) -> None:
    body = ping(6 * 1024 * 1024)  # over the SDK's default of 4 MiB, under the service's 10 MiB
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        content = body if framing == "content-length" else chunks(body)
        response = await client.post("/mcp", content=content, headers=HEADERS)
    assert response.status_code == 200, response.text[:300]
    [data] = [line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:")]
    assert json.loads(data) == {"jsonrpc": "2.0", "id": 1, "result": {}}  # an event stream of the one answer


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_every_route_answers_a_body_past_the_ceiling_with_the_documented_json_413(
    service: ServiceHandle, path: str, framing: str
) -> None:
    body = ping(CEILING + 1)
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        content = body if framing == "content-length" else chunks(body)
        response = await client.post(path, content=content, headers=HEADERS)
    assert response.status_code == 413 and response.headers["content-type"] == "application/json"
    assert response.json() == REFUSAL
