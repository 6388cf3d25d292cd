"""Backends nobody here wrote, for behaviour that depends on the backend: `@modelcontextprotocol/server-everything`
(installed with npm into a cache directory on first use) over stdio.

Outside CI a machine without npm skips these tests, saying why; in CI (`CI` set) a missing npm fails them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

EVERYTHING = "@modelcontextprotocol/server-everything"
EVERYTHING_VERSION = "2026.8.31"  # the version these tests were written against


def everything_stdio() -> dict[str, Any]:
    """server-everything over stdio, as an entry of the servers file."""
    return {"command": everything_command(), "args": ["stdio"]}


def _cache() -> Path:
    root = os.environ.get("MCP_BATCH_TEST_CACHE") or Path.home() / ".cache" / "mcp-batch-tests"
    return Path(root) / "npm"


def everything_command() -> str:
    """The server-everything executable, installed into the cache if it is not there yet."""
    binary = _cache() / "node_modules" / ".bin" / "mcp-server-everything"
    if binary.exists():
        return str(binary)
    npm = shutil.which("npm")
    if npm is None:
        if os.environ.get("CI"):
            pytest.fail("npm is needed for the tests against server-everything")
        pytest.skip("npm is not installed: the tests against server-everything need it")
    _cache().mkdir(parents=True, exist_ok=True)
    # Parallel test workers may all get here first: one installs, the others wait for it and find the binary.
    with (_cache() / ".install-lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return str(binary)
        argv = [npm, "install", "--no-audit", "--no-fund", "--silent", f"{EVERYTHING}@{EVERYTHING_VERSION}"]
        done = subprocess.run(argv, cwd=_cache(), capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not binary.exists():
        message = f"could not install {EVERYTHING}: {done.stderr.strip()[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return str(binary)
