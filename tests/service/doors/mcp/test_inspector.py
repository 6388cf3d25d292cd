"""What a client nobody here wrote receives from the MCP door: the MCP Inspector's CLI (`@modelcontextprotocol/
inspector`, `--cli`) against the real service, worker and demo backend. tools/list of the batch tools stays within
12 KB of compact JSON, and three `echo` calls answer in at most 500 bytes of text, the same JSON as the structured
content.

The Inspector and the Node it runs on are npm packages pinned in tests/inspector/ (package.json and its
package-lock.json); `npm ci` installs them there the first time, from the npm registry.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.service.doors.mcp.test_sizes import ECHOES, compact_size
from tests.support import ServiceHandle

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

FOLDER = Path(__file__).resolve().parents[3] / "inspector"
BIN = FOLDER / "node_modules" / ".bin"
CLI = FOLDER / "node_modules" / "@modelcontextprotocol" / "inspector" / "cli" / "build" / "cli.js"


@pytest.fixture(scope="session")
def inspector() -> list[str]:
    """The Inspector's command line, installed by `npm ci` when it is missing (one installer at a time)."""
    with (FOLDER / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ((BIN / "node").exists() and CLI.exists()):
            npm = shutil.which("npm")
            assert npm is not None, "npm is needed to install the MCP Inspector (tests/inspector)"
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=FOLDER, check=True, timeout=600)
    return [str(BIN / "node"), str(CLI), "--cli"]


async def ask(inspector: list[str], service: ServiceHandle, *args: str) -> Any:
    """One Inspector CLI request to the door; its JSON answer."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}  # its own Node for what it starts
    argv = [*inspector, f"{service.base_url}/mcp", "--transport", "http", *args]
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    async with asyncio.timeout(120):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return json.loads(out)


async def test_the_inspector_lists_the_batch_tools_in_twelve_kilobytes_and_gets_three_echoes_in_500_bytes(
    inspector: list[str], service: ServiceHandle
) -> None:
    listed = await ask(inspector, service, "--method", "tools/list")
    assert len(listed["tools"]) == 7
    size = compact_size(listed)
    print(f"tools/list through the Inspector: {size} bytes")
    assert size <= 12_000

    calls = json.dumps(ECHOES, separators=(",", ":"))
    args = ["--method", "tools/call", "--tool-name", "call_tools_batch", "--tool-arg", f"calls={calls}"]
    answer = await ask(inspector, service, *args)
    [block] = answer["content"]
    print(f"three echoes through the Inspector: {len(block['text'].encode())} bytes")
    assert len(block["text"].encode()) <= 500 and json.loads(block["text"]) == answer["structuredContent"]
    assert answer["structuredContent"]["ok"] is True and "null" not in block["text"]
