"""A running `mcp-batch dev` is found without flags: by `status` and the client commands (a real dev, started as the
installed command); a second dev refuses; with none running, the commands say where they looked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.client import Unreachable
from mcp_batch_cli import discovery
from mcp_batch_cli.command_errors import CommandError, explained
from mcp_batch_cli.status import operator_settings
from tests.support import MCP_BATCH, command_env, eventually, free_port, run_command

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "batch.json"


def entry(path: Path) -> dict[str, Any]:
    """What the dev wrote so far (nothing before it has)."""
    fields: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    return fields


async def wait_for_dev(state_file: Path, process: asyncio.subprocess.Process, log: Path) -> discovery.DevRun:
    """The dev's entry, once it names its Redis and its API answers."""
    async with httpx.AsyncClient() as http:

        async def answering() -> discovery.DevRun | None:
            assert process.returncode is None, f"the dev exited early (its output: {log})"
            fields = entry(state_file)
            if fields.get("redis_url"):
                with suppress(httpx.TransportError):
                    if (await http.get(f"{fields['api_url']}/healthz")).status_code == 200:
                        return discovery.DevRun(**fields)
            return None

        return await eventually(answering, what="the dev's state file and its API", timeout=90)


async def test_status_and_the_client_commands_find_a_running_dev_and_a_second_dev_refuses(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = command_env(XDG_STATE_HOME=str(state), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    port, log = free_port(), tmp_path / "dev.log"
    with log.open("wb") as out:
        dev = await asyncio.create_subprocess_exec(
            MCP_BATCH, "dev", "--port", str(port), env=env, stdout=out, stderr=out, cwd=tmp_path
        )
    state_file = state / "mcp-batch" / "dev.json"
    try:
        run = await wait_for_dev(state_file, dev, log)
        assert (run.pid, run.api_url) == (dev.pid, f"http://127.0.0.1:{port}")

        async def status() -> tuple[int, str, str] | None:
            ran = await run_command("status", env=env)
            return ran if ran[0] == 0 else None

        # the worker's first heartbeat may still be on its way
        code, out, err = await eventually(status, what="`mcp-batch status` answering 0", timeout=60)
        assert f"from the running mcp-batch dev (pid {dev.pid})" in out
        assert "  demo " in out and "  demo_http " in out  # the dev's own servers file

        code, out, err = await run_command("submit", str(EXAMPLE), "--wait", "--json", env=env)
        assert code == 3, err  # the example's `oops` call fails on purpose
        assert json.loads(out)["status"] == "completed"

        code, out, err = await run_command("dev", "--port", str(free_port()), env=env)
        assert code == 1
        assert f"mcp-batch dev is already running (pid {dev.pid}, API at http://127.0.0.1:{port})" in err
        assert "is running at" not in out
        assert json.loads(state_file.read_text())["pid"] == dev.pid  # the first dev's entry is left as it was
    finally:
        if dev.returncode is None:
            dev.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            await dev.wait()
    assert not state_file.exists(), log.read_text()


def test_with_no_dev_running_the_commands_say_where_they_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("MCP_BATCH_SERVER_URL", raising=False)
    monkeypatch.delenv("MCP_BATCH_REDIS_URL", raising=False)
    url, looked = discovery.server_url(None)
    assert url == discovery.DEFAULT_SERVER_URL
    assert looked is not None and str(tmp_path / "mcp-batch" / "dev.json") in looked
    message = str(
        explained(Unreachable(f"could not reach the mcp-batch server at {url} (refused)", url), looked=looked)
    )
    assert message.endswith(f"(refused); {looked}")
    _, source = operator_settings()
    assert (
        source == f"the default: no MCP_BATCH_REDIS_URL, and no running mcp-batch dev in {tmp_path}/mcp-batch/dev.json"
    )


async def test_a_dev_whose_api_is_gone_is_named_when_it_cannot_be_reached(tmp_path: Path) -> None:
    # the dev's file names a live process (this test's parent) whose API is gone: the command goes there and says so
    state = tmp_path / "state"
    (state / "mcp-batch").mkdir(parents=True)
    gone = f"http://127.0.0.1:{free_port()}"
    (state / "mcp-batch" / "dev.json").write_text(json.dumps({"pid": os.getppid(), "api_url": gone}))
    code, _, err = await run_command("list", env=command_env(XDG_STATE_HOME=str(state)))
    assert code == 1 and f"could not reach the mcp-batch server at {gone} (" in err


def test_a_dev_entry_of_a_dead_process_is_taken_over_and_removed_on_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = discovery.state_file()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": 2**22 + 12345, "api_url": "http://127.0.0.1:1"}))  # beyond any pid
    assert discovery.running_dev() is None
    with discovery.claimed("http://127.0.0.1:8000") as claim:
        claim.update("redis://127.0.0.1:6390/0", "servers.json")
        assert discovery.running_dev() == discovery.DevRun(
            os.getpid(), "http://127.0.0.1:8000", "redis://127.0.0.1:6390/0", "servers.json"
        )
    assert not path.exists()


def test_a_dev_entry_of_a_live_process_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = discovery.state_file()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": os.getppid(), "api_url": "http://127.0.0.1:8123"}))
    refusal = f"already running \\(pid {os.getppid()}, API at http://127.0.0.1:8123\\)"
    with pytest.raises(CommandError, match=refusal), discovery.claimed("http://127.0.0.1:8000"):
        pass
    assert json.loads(path.read_text())["pid"] == os.getppid()
