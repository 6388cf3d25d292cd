"""A backend's terminal escapes never reach the operator's terminal: every verb's output, human or JSON, on stdout
and stderr, holds no control character but newline and tab (nor a bidi override). Through the installed
`mcp-batch` command, the real API, worker and the tests' backend, whose `hostile` tool answers clear-screen,
set-title, colour and 8-bit CSI sequences, a carriage return and a bidi override."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.support import ServiceHandle, command_env, finished, run_command, submit

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

# C0 but tab and newline, DEL, C1, and the bidi embeddings, overrides, isolates and marks
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CALLS = [
    {"id": "ok", "server": "demo", "tool": "hostile"},
    {"id": "bad", "server": "demo", "tool": "hostile", "arguments": {"fail": True}},
    {"id": "odd", "server": "demo", "tool": "no\x1b[2Jsuch\x9b2J\u202etool"},
]


def controls(text: str) -> list[str]:
    return sorted({repr(c) for c in FORBIDDEN.findall(text)})


async def test_no_verb_prints_a_backends_control_characters(
    service: ServiceHandle, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    env = command_env(MCP_BATCH_SERVER_URL=service.base_url, XDG_STATE_HOME=str(tmp_path / "state"))
    batch_id = (await submit(client, CALLS))["id"]
    await finished(client, batch_id)
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"calls": CALLS}))
    verbs = [
        ("item", batch_id, "ok"),
        ("item", batch_id, "bad"),
        ("item", batch_id, "odd"),
        ("item", batch_id, "ok", "--json"),
        ("get", batch_id),
        ("results", batch_id),
        ("watch", batch_id),
        ("watch", batch_id, "--json"),
        ("list",),
        ("validate", str(path)),
        ("submit", str(path), "--wait"),
        ("retry", batch_id),
    ]
    seen = {}
    for argv in verbs:
        code, out, err = await run_command(*argv, env=env)
        assert code in (0, 3), (argv, code, err)
        seen[" ".join(a for a in argv if a != batch_id)] = controls(out) + controls(err)
    assert all(found == [] for found in seen.values()), seen
    code, out, _ = await run_command("item", batch_id, "ok", env=env)
    # shown, escaped where it cannot be printed: the text is there, its controls visible, its layout kept
    assert "clear\\x1b[2J title\\x1b]0;pwned\\x07" in out and "csi\\x9b2J" in out and "bidi\\u202eevil" in out
    assert re.search(r"tab\s+here\nsecond line", out)  # rich lays the tab out as spaces
