"""MCP's official conformance suite (`@modelcontextprotocol/conformance`) against the MCP door of a real
`mcp-batch api` process: the server scenarios that apply to any server, DNS-rebinding protection among them.

The suite and the Node it needs (22; it fails on 20) are npm packages pinned in tests/conformance/ (package.json and
its package-lock.json); `npm ci` installs them there the first time, from the npm registry.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mcp_batch.settings import Settings
from tests.support import api_process

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

SUITE = Path(__file__).resolve().parents[3] / "conformance"
NODE = SUITE / "node_modules" / ".bin" / "node"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SCENARIOS = ("server-initialize", "ping", "tools-list", "resources-list", "prompts-list", "dns-rebinding-protection")


@pytest.fixture(scope="session")
def conformance() -> list[str]:
    """The suite's command line, installed by `npm ci` when it is missing (one installer at a time)."""
    with (SUITE / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (NODE.exists() and CLI.exists()):
            npm = shutil.which("npm")
            assert npm is not None, "npm is needed to install the MCP conformance suite (tests/conformance)"
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=SUITE, check=True, timeout=600)
    return [str(NODE), str(CLI)]


def test_the_mcp_door_passes_the_conformance_suites_server_scenarios(
    conformance: list[str], settings: Settings, tmp_path: Path
) -> None:
    with api_process(settings, tmp_path) as base_url:  # auth off, as `mcp-batch dev` runs: the suite sends no key
        failed = {}
        for scenario in SCENARIOS:
            out = tmp_path / scenario
            argv = [*conformance, "server", "--url", f"{base_url}/mcp", "--scenario", scenario, "-o", str(out)]
            run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            checks = [check for path in out.rglob("checks.json") for check in json.loads(path.read_text())]
            bad = [check for check in checks if check["status"] == "FAILURE"]
            if run.returncode != 0 or bad or not any(check["status"] == "SUCCESS" for check in checks):
                failed[scenario] = bad or run.stdout[-2000:] + run.stderr[-2000:]
    assert failed == {}, json.dumps(failed, indent=2)[:6000]
