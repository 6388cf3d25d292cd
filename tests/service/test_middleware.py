"""Request bodies over `max_body_bytes` are refused with 413 on every route, before they are read whole: a declared
Content-Length at once, a chunked body as soon as its count passes the limit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.settings import Settings
from tests.support import ServiceHandle, running_service

pytestmark = pytest.mark.timeout(90)

LIMIT = 256 * 1024
PATHS = ["/v1/batches", "/v1/batches:validate", "/mcp", "/mcp/tools/call"]
REFUSAL = {"detail": f"request body over {LIMIT} bytes"}


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[ServiceHandle]:
    async with running_service(settings.model_copy(update={"max_body_bytes": LIMIT})) as handle:
        yield handle


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response with a Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":")[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length")
    )
    return status, await reader.readexactly(length)


async def open_request(
    service: ServiceHandle, path: str, framing: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(service.base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\n{framing}\r\n\r\n".encode()
    )
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("path", PATHS)
async def test_a_declared_length_over_the_limit_is_refused_before_any_byte_is_sent(
    service: ServiceHandle, path: str
) -> None:
    reader, writer = await open_request(service, path, f"Content-Length: {1 << 30}")
    try:
        async with asyncio.timeout(20):  # not one byte of the gigabyte was sent
            status, body = await read_response(reader)
    finally:
        writer.close()
        await writer.wait_closed()
    assert (status, json.loads(body)) == (413, REFUSAL)


@pytest.mark.parametrize("path", PATHS)
async def test_a_chunked_body_is_refused_once_it_passes_the_limit_before_it_ends(
    service: ServiceHandle, path: str, redis: aioredis.Redis
) -> None:
    reader, writer = await open_request(service, path, "Transfer-Encoding: chunked")
    chunk = b"[" + b" " * (16 * 1024 - 1)
    try:
        for _ in range(LIMIT // len(chunk) + 1):  # just past the limit; the body's last chunk is never sent
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
        async with asyncio.timeout(20):
            status, body = await read_response(reader)
    finally:
        writer.close()
        await writer.wait_closed()
    assert (status, json.loads(body)) == (413, REFUSAL)
    assert await redis.keys("mcpb:batch:*") == []


@pytest.mark.parametrize("path", PATHS)
async def test_a_streamed_body_over_the_limit_gets_413_from_an_ordinary_client(
    service: ServiceHandle, path: str
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(64):  # 4 MiB, sixteen times the limit, with no Content-Length
            yield b" " * 65_536

    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        response = await client.post(path, content=body(), headers=headers)
    assert response.status_code == 413
    assert response.json() == REFUSAL


async def test_a_chunked_body_under_the_limit_is_taken(service: ServiceHandle) -> None:
    batch = json.dumps({"calls": [{"server": "demo", "tool": "echo", "arguments": {"message": "x" * 10_000}}]})

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(batch), 4096):
            yield batch[start : start + 4096].encode()

    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        response = await client.post("/v1/batches", content=body(), headers={"content-type": "application/json"})
    assert response.status_code == 202, response.text


async def test_the_limit_defaults_to_ten_mebibytes() -> None:
    assert Settings().max_body_bytes == 10 * 1024 * 1024
