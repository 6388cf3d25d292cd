"""The stdio transport: the SDK's session over pipes of our own. These tests fail if the SDK changes what it relies
on, and show a session through it keeps the exit code and last stderr line, relays progress, stops its server
(children included), and tells a session its server died."""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import sys
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client import Transport
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import CONNECTION_CLOSED

from mcp_batch.backends.connect import connect
from mcp_batch.backends.servers_file import StdioBackend
from mcp_batch.backends.stdio import StdioTransport
from mcp_batch.backends.stdio_pipes import Inbound, Outbound, StdioProbe
from mcp_batch.errors import BackendError
from tests.support import eventually

pytestmark = pytest.mark.timeout(60)


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_") or name in {"__aiter__", "__anext__"}} | {
        "__aenter__",
        "__aexit__",
    }


def test_the_streams_still_have_every_member_of_the_sdks_stream_protocols() -> None:
    assert _members(ReadStream) <= set(dir(Inbound))
    assert _members(WriteStream) <= set(dir(Outbound))
    assert {"receive", "aclose", "__aiter__", "__anext__"} <= _members(ReadStream)
    assert {"send", "aclose"} <= _members(WriteStream)


def test_the_sdk_still_reads_and_writes_a_transport_the_way_the_streams_answer() -> None:
    # The dispatcher iterates the read stream (EndOfStream ends the loop, ClosedResourceError counts as EOF) and maps
    # a write's BrokenResourceError/ClosedResourceError to CONNECTION_CLOSED: the streams raise exactly those.
    run = inspect.getsource(JSONRPCDispatcher.run)
    assert "async for item in self._read_stream" in run and "anyio.ClosedResourceError" in run
    send = inspect.getsource(JSONRPCDispatcher.send_raw_request)
    assert "except (anyio.BrokenResourceError, anyio.ClosedResourceError)" in send
    assert "Transport" in inspect.signature(Client).parameters["server"].annotation
    assert callable(mcp_types.jsonrpc_message_adapter.validate_python)
    transport: Transport = StdioTransport("true", [], {}, None, StdioProbe())  # mypy: the SDK's protocol
    assert transport is not None


async def test_a_session_calls_a_tool_and_relays_its_progress() -> None:
    seen: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(done)

    transport = StdioTransport(sys.executable, ["-m", "tests.chatty_backend"], {}, None, StdioProbe())
    async with Client(transport) as client:
        result = await client.session.call_tool("chatty", {"reports": 3}, progress_callback=progress)
    assert not result.is_error and seen == [1, 2, 3]


async def test_a_dying_server_leaves_its_exit_code_and_last_line() -> None:
    script = "import sys; print('first', file=sys.stderr); print('the last words', file=sys.stderr); sys.exit(7)"
    with pytest.raises(BackendError) as failed:
        async with connect(StdioBackend(command=sys.executable, args=["-c", script]), 10):
            pass
    assert str(failed.value) == (
        "the stdio server exited with code 7 while opening the session (last stderr line: the last words)"
    )


async def test_the_servers_stderr_still_reaches_this_processs_stderr() -> None:
    errlog = io.StringIO()
    probe = StdioProbe()
    script = "import sys; sys.stderr.write('one\\ntwo'); sys.stdin.read()"
    async with StdioTransport(sys.executable, ["-c", script], {}, None, probe, errlog):
        pass
    assert await probe.last_line(wait=10) == "two" and probe.exit_code == 0
    assert errlog.getvalue() == "one\ntwo"


async def test_a_call_in_flight_when_the_server_dies_ends_with_connection_closed() -> None:
    script = "import sys; sys.stdin.readline(); sys.exit(3)"  # reads the request, then dies
    probe = StdioProbe()
    async with StdioTransport(sys.executable, ["-c", script], {}, None, probe) as (inbound, outbound):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(inbound, outbound)

        async def nothing(*_: Any) -> Any:
            return None

        async with anyio.create_task_group() as tg:
            await tg.start(dispatcher.run, nothing, nothing)
            with pytest.raises(MCPError) as failed:
                with anyio.fail_after(10):
                    await dispatcher.send_raw_request("ping", None)
            assert failed.value.error.code == CONNECTION_CLOSED
    assert probe.exit_code == 3


async def test_a_server_that_ignores_its_closed_stdin_is_stopped_with_its_children() -> None:
    # The server starts a child and ignores both EOF and SIGTERM's default: the group's SIGKILL ends both.
    script = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print(child.pid, file=sys.stderr, flush=True); time.sleep(60)"
    )
    probe = StdioProbe()
    async with StdioTransport(sys.executable, ["-c", script], {}, None, probe, io.StringIO()):
        line = await eventually(lambda: probe.last_line(wait=0.05), what="the child's pid on stderr", timeout=10)
    child = int(line)
    assert probe.exit_code == -9
    await eventually(lambda: not _alive(child), what="the server's child to end", timeout=10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"  # a zombie (reaped by init later) is dead


def test_the_transport_works_the_same_on_uvloop_which_the_worker_runs_on() -> None:
    uvloop = pytest.importorskip("uvloop")
    scenarios = [
        test_a_session_calls_a_tool_and_relays_its_progress,
        test_a_dying_server_leaves_its_exit_code_and_last_line,
        test_a_call_in_flight_when_the_server_dies_ends_with_connection_closed,
        test_a_server_that_ignores_its_closed_stdin_is_stopped_with_its_children,
    ]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        for scenario in scenarios:
            runner.run(scenario())
