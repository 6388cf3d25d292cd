"""A backend session's call: a plain answer in one send on the client's session, an answer that asks for input
through the SDK's own input-required driver (the session's seats answer it), over stdio and streamable HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mcp_batch.backends.servers_file import Backend, parse_servers
from tests.support import HttpBackendProcess, stdio_demo
from worker.backend_session import BackendSession

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["stdio", "http"])
def backend(request: pytest.FixtureRequest, http_backend: HttpBackendProcess) -> Backend:
    entry = stdio_demo() if request.param == "stdio" else {"url": http_backend.url}
    registry = parse_servers(json.dumps({"mcpServers": {"demo": entry}}), {})
    found = registry.get("demo")
    assert found is not None
    return found


@pytest.fixture
async def session(backend: Backend) -> AsyncIterator[BackendSession]:
    opened = BackendSession("demo", backend, connect_timeout=30, call_timeout=30)
    await opened.open()
    yield opened
    await opened.close()


def text(result: Any) -> str:
    return str(result.content[0].text)


async def test_a_plain_answer_comes_back(session: BackendSession) -> None:
    result = await session.call("echo", {"message": "hi"}, timeout=10)
    assert not result.is_error and text(result) == "hi"


async def test_an_answer_asking_for_input_is_driven_to_its_end_through_the_seats(session: BackendSession) -> None:
    # No batch question is bound to this call: its seat declines at once, and the backend is sent the decline.
    result = await session.call("ask_round", {"message": "Ship it?"}, timeout=10)
    assert text(result) == "answered decline: null"
