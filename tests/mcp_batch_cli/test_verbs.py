"""Every client verb, run as the installed `mcp-batch` command against the real API, worker, Redis and backends;
the server is found through $MCP_BATCH_SERVER_URL (the flag is test_commands.py's)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from tests.support import ServiceHandle, command_env, finished, run_batch, run_command, submit

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ECHO = {"server": "demo", "tool": "echo"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"cancel_grace_seconds": 0.2})


@pytest.fixture
def env(service: ServiceHandle, tmp_path: Path) -> dict[str, str]:
    return command_env(MCP_BATCH_SERVER_URL=service.base_url, XDG_STATE_HOME=str(tmp_path / "state"))


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def json_lines(calls: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(call) + "\n" for call in calls)


async def test_submit_prints_the_id_and_url_or_with_json_the_document(
    env: dict[str, str], service: ServiceHandle, tmp_path: Path
) -> None:
    path = write(tmp_path, "batch.json", json.dumps({"calls": [ECHO]}))
    code, out, _ = await run_command("submit", path, env=env)
    batch_id, url = out.split()
    assert code == 0 and url == f"{service.base_url}/v1/batches/{batch_id}"
    code, out, _ = await run_command("submit", path, "--json", "--mode", "serial", "--priority", "high", env=env)
    assert code == 0 and json.loads(out)["mode"] == "serial"  # a flag overrides the file
    assert json.loads(out)["priority"] == "high"


async def test_submit_sends_a_json_lines_file_as_it_is_with_its_options_as_flags(
    env: dict[str, str], tmp_path: Path
) -> None:
    calls = [ECHO | {"id": "a", "arguments": {"message": "one"}}, {"id": "b", "server": "demo", "tool": "fail"}]
    path = write(tmp_path, "calls.jsonl", json_lines(calls))
    options = ("--on-error", "stop", "--mode", "serial", "--json")
    code, out, err = await run_command("submit", path, "--wait", *options, env=env)
    document = json.loads(out)
    assert code == 3, err
    assert (document["on_error"], document["mode"], document["failed_ids"]) == ("stop", "serial", ["b"])
    assert err.splitlines()[-1].startswith("2/2 done, 1 failed")


async def test_a_bad_json_lines_file_is_reported_by_line_and_exits_2(env: dict[str, str], tmp_path: Path) -> None:
    path = write(tmp_path, "calls.jsonl", json_lines([ECHO, {"tool": "echo"}]) + "not json\n")
    code, out, err = await run_command("submit", path, env=env)
    assert (code, out) == (2, "")
    assert "the server rejected the batch, nothing was stored:" in err
    assert "line 2, field 'server': Field required" in err
    assert "line 3: not JSON: Expecting value" in err


async def test_get_item_and_results(env: dict[str, str], client: httpx.AsyncClient) -> None:
    calls = [ECHO | {"id": "a", "arguments": {"message": "hello there"}}, {"id": "b", "server": "demo", "tool": "fail"}]
    batch_id = (await run_batch(client, calls))["id"]

    code, out, _ = await run_command("get", batch_id, "--json", env=env)
    assert code == 3 and json.loads(out)["failed_ids"] == ["b"]  # ended, not every call ok
    code, out, _ = await run_command("get", batch_id, "--limit", "1", env=env)
    assert code == 3 and out.splitlines()[1] == "1 failed, 1 ok of 2"
    assert out.splitlines()[-1] == f"items 1-1 of 2; more: mcp-batch get {batch_id} --offset 1 --limit 1"
    code, out, _ = await run_command("get", batch_id, "--offset", "1", env=env)
    assert [row.split()[:4] for row in out.splitlines()[4:]] == [["b", "demo", "fail", "error"]]

    code, out, _ = await run_command("item", batch_id, "a", env=env)
    first, text = out.splitlines()
    assert code == 0 and first.startswith("item a (#0, demo/echo, ") and first.endswith("): ok")
    assert text == "hello there"
    code, out, _ = await run_command("item", batch_id, "b", env=env)
    assert out.splitlines()[0].endswith("): error") and out.splitlines()[1].startswith("error tool_error: ")
    assert out.count("this tool always fails") == 1  # the tool's text is the error's message: said once
    code, out, _ = await run_command("item", batch_id, "a", "--json", env=env)
    assert (json.loads(out)["id"], json.loads(out)["structured_content"]) == ("a", {"result": "hello there"})
    code, _, err = await run_command("item", batch_id, "nope", env=env)
    assert code == 1 and f"no item 'nope' in batch {batch_id!r}" in err

    code, out, _ = await run_command("results", batch_id, "--status", "error", env=env)
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["b"]
    for verb in ("get", "results", "delete", "item"):  # a flag a verb does not take: its own usage line says so
        code, _, err = await run_command(verb, batch_id, *(["a"] if verb == "item" else []), "--nope", env=env)
        assert code == 2 and f"Usage: mcp-batch {verb} " in err and "unrecognized arguments: --nope" in err


async def test_list_shows_a_table_pages_and_json(env: dict[str, str], client: httpx.AsyncClient) -> None:
    older = (await run_batch(client, [ECHO]))["id"]
    newer = (await run_batch(client, [ECHO, ECHO]))["id"]
    failing = (await run_batch(client, [ECHO, {"server": "demo", "tool": "fail"}]))["id"]
    code, out, _ = await run_command("list", env=env)
    header, *rows = out.splitlines()
    columns = ["id", "status", "calls", "ok", "failed", "not", "run", "created", "ended", "retry", "of"]
    assert code == 0 and header.split() == columns
    assert [row.split()[:7] for row in rows][:1] == [[failing, "completed", "with", "failures", "2", "1", "1"]]
    assert [row.split()[:6] for row in rows[1:]] == [
        [newer, "completed", "2", "2", "0", "0"],
        [older, "completed", "1", "1", "0", "0"],
    ]
    assert re.fullmatch(r"\d\d:\d\d:\d\d", rows[1].split()[6])  # today's times, as a clock shows them

    code, out, _ = await run_command("list", "--limit", "1", env=env)
    assert out.splitlines()[1].split()[0] == failing and "more: mcp-batch list --cursor " in out
    code, out, _ = await run_command("list", "--limit", "1", "--all", "--json", env=env)
    assert [b["id"] for b in json.loads(out)["batches"]] == [failing, newer, older]
    assert json.loads(out)["batches"][0] | {"succeeded": 1, "failed": 1, "not_run": 0} == json.loads(out)["batches"][0]
    code, out, _ = await run_command("list", "--status", "running,queued", env=env)
    assert out.strip() == "no batches in these statuses"


async def test_cancel_says_what_happens_and_refuses_an_ended_batch(
    env: dict[str, str], client: httpx.AsyncClient
) -> None:
    batch = await submit(client, [{"server": "demo_http", "tool": "sleep", "arguments": {"seconds": 30}}] * 3)
    code, out, _ = await run_command("cancel", batch["id"], env=env)
    assert code == 0
    assert out.startswith(f"batch {batch['id']} is cancelling: nothing new starts;") or out == (
        f"batch {batch['id']} cancelled\n"
    )
    assert (await finished(client, batch["id"]))["status"] == "cancelled"
    code, out, err = await run_command("cancel", batch["id"], "--json", env=env)
    assert code == 1 and f"batch {batch['id']!r} has already ended (cancelled): nothing to cancel" in err


async def test_retry_makes_a_new_batch_of_what_failed(env: dict[str, str], client: httpx.AsyncClient) -> None:
    batch_id = (await run_batch(client, [ECHO, {"id": "bad", "server": "demo", "tool": "fail"}]))["id"]
    code, out, _ = await run_command("retry", batch_id, env=env)
    line, url = out.splitlines()
    new_id = line.split()[1]
    assert code == 0 and line == f"batch {new_id} retries the 1 unsuccessful items of {batch_id}"
    assert url.endswith(f"/v1/batches/{new_id}")
    code, out, _ = await run_command("retry", new_id, "--wait", "--json", env=env)  # fails again: exit 3
    assert code == 3 and json.loads(out)["retry_of"] == new_id
    code, _, err = await run_command("retry", "no-such-batch", env=env)
    assert code == 1 and "no batch 'no-such-batch'" in err


async def test_validate_is_the_dry_run(env: dict[str, str], tmp_path: Path) -> None:
    good = write(tmp_path, "good.json", json.dumps({"calls": [ECHO, ECHO | {"id": "x"}]}))
    code, out, _ = await run_command("validate", good, env=env)
    unknown = "estimate: unknown (no limit applies and no call latency is known yet)"
    assert (code, out) == (0, f"valid: all 2 calls would be dispatched\n{unknown}\n")
    bad = write(tmp_path, "bad.jsonl", json_lines([ECHO, {"id": "odd", "server": "demo", "tool": "no_such_tool"}]))
    code, out, _ = await run_command("validate", bad, env=env)
    assert code == 3 and out.splitlines()[0] == "1 of 2 calls would not be dispatched:"
    assert out.splitlines()[2].split()[:3] == ["1", "odd", "unknown_tool"]
    code, out, _ = await run_command("validate", bad, "--json", "--priority", "low", env=env)
    assert code == 3 and json.loads(out)["valid"] is False
    assert json.loads(out)["estimate"]["unknown_latency"] == ["demo/echo"]
    invalid = write(tmp_path, "invalid.json", json.dumps({"calls": [ECHO, ECHO | {"id": "0"}]}))
    code, _, err = await run_command("validate", invalid, env=env)
    assert code == 2 and "call 1, field 'id': duplicate id" in err


async def test_watch_follows_the_batch_to_its_end_and_resumes_after_a_seq(
    env: dict[str, str], client: httpx.AsyncClient
) -> None:
    calls = [ECHO | {"id": f"e{n}"} for n in range(3)] + [{"id": "bad", "server": "demo", "tool": "fail"}]
    batch_id = (await submit(client, calls))["id"]
    code, out, err = await run_command("watch", batch_id, env=env)
    header, *items, summary = out.splitlines()
    assert code == 3, err
    assert header.split() == ["finished", "call", "status", "took", "id", "(server/tool)"]
    assert sorted(line.split()[1] for line in items) == ["#0", "#1", "#2", "#3"]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", line.split()[0]) for line in items)
    assert {line.split()[-2]: line.split()[2] for line in items}["bad"] == "error"
    assert summary == f"batch {batch_id} completed with failures: 1 failed, 3 ok of 4"
    assert err.splitlines()[-1].startswith("4/4 done, 1 failed")

    code, out, _ = await run_command("watch", batch_id, "--after", "3", "--json", env=env)
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["id"] for e in events if e["event"] == "item"] == ["4"]
    assert events[-1]["event"] == "end" and events[-1]["data"]["ok"] is False
    code, out, _ = await run_command("watch", batch_id, "--failures", env=env)
    assert [line.split()[-2] for line in out.splitlines()[1:-1]] == ["bad"]


async def test_meta_tags_a_submit_list_filters_by_it_and_delete_removes_an_ended_batch(
    env: dict[str, str], client: httpx.AsyncClient, tmp_path: Path
) -> None:
    path = write(tmp_path, "calls.jsonl", json_lines([ECHO]))
    code, out, err = await run_command("submit", path, "--meta", "job=nightly", "--meta", "when=a=b", "--json", env=env)
    assert code == 0, err
    tagged = json.loads(out)
    assert tagged["metadata"] == {"job": "nightly", "when": "a=b"}
    await run_batch(client, [ECHO])
    code, out, _ = await run_command("list", "--meta", "job=nightly", "--json", env=env)
    assert code == 0 and [b["id"] for b in json.loads(out)["batches"]] == [tagged["id"]]
    code, out, _ = await run_command("list", "--after", "2999-01-01T00:00:00Z", env=env)
    assert code == 0 and "no batches that match" in out
    code, _, err = await run_command("list", "--meta", "nightly", env=env)
    assert code == 2 and "KEY=VALUE" in err
    running = await submit(client, [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 30}}])
    code, _, err = await run_command("delete", running["id"], env=env)
    assert code == 1 and "only an ended batch can be deleted" in err and f"mcp-batch cancel {running['id']}" in err
    await finished(client, tagged["id"])
    code, out, _ = await run_command("delete", tagged["id"], "--json", env=env)
    assert code == 0 and json.loads(out) == {"id": tagged["id"], "deleted": True}
    assert (await client.get(f"/v1/batches/{tagged['id']}")).status_code == 404
    await client.post(f"/v1/batches/{running['id']}/cancel")
