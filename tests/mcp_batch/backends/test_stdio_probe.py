"""The stdio probe wraps an SDK internal: these tests fail if the SDK changes under it, and show the probe keeps the
exit code and the last stderr line while the backend's stderr still reaches ours."""

from __future__ import annotations

import inspect
import io
import sys

import mcp.client.stdio as sdk_stdio
import pytest

from mcp_batch.backends import stdio_probe
from mcp_batch.backends.connect import connect
from mcp_batch.backends.servers_file import StdioBackend
from mcp_batch.errors import BackendError


def test_the_sdk_still_starts_stdio_servers_through_the_wrapped_factory() -> None:
    original = stdio_probe._original
    assert list(inspect.signature(original).parameters) == ["command", "args", "env", "errlog", "cwd"]
    assert "_create_platform_compatible_process(" in inspect.getsource(sdk_stdio.stdio_client)
    stdio_probe.install()
    assert sdk_stdio._create_platform_compatible_process is stdio_probe._spawn


async def test_a_dying_server_leaves_its_exit_code_and_last_line() -> None:
    script = "import sys; print('first', file=sys.stderr); print('the last words', file=sys.stderr); sys.exit(7)"
    with pytest.raises(BackendError) as failed:
        async with connect(StdioBackend(command=sys.executable, args=["-c", script]), 10):
            pass
    assert str(failed.value) == (
        "the stdio server exited with code 7 while opening the session (last stderr line: the last words)"
    )


async def test_the_servers_stderr_still_reaches_where_the_sdk_would_have_written_it() -> None:
    errlog = io.StringIO()
    script = "import sys; sys.stderr.write('one\\ntwo')"
    with stdio_probe.watching(stdio_probe.StdioProbe()) as probe:
        process = await sdk_stdio._create_platform_compatible_process(
            command=sys.executable, args=["-c", script], env=None, errlog=errlog, cwd=None
        )
    await process.wait()
    assert await probe.last_line(wait=10) == "two" and probe.exit_code == 0
    assert errlog.getvalue() == "one\ntwo"
