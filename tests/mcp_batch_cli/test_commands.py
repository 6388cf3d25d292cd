"""The client commands (submit, get, results) against the real service: API, worker, Redis and demo backends.

The CLI is synchronous, so each command runs in a thread while the service answers in this test's event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from mcp_batch.keys import Keys
from mcp_batch.models import Counts
from mcp_batch_cli.terminal import ProgressView
from tests.support import ServiceHandle, cli, eventually_blocking, free_port, run_batch, submit

pytestmark = pytest.mark.timeout(90)

EXAMPLE = Path(__file__).parents[2] / "examples" / "batch.json"
SECRET = "sk-live-7f3a9c1e5b"


def write_json(tmp_path: Path, body: Any) -> str:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(body))
    return str(path)


def example_calls() -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = json.loads(EXAMPLE.read_text())["calls"]
    return calls


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


async def test_submit_wait_reports_the_batch_failures_first_and_exits_3_when_a_call_fails(
    service: ServiceHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    code = await cli("submit", str(EXAMPLE), "--wait", "--server-url", service.base_url)
    out, err = capsys.readouterr()
    status, counts, blank, header, *rows = out.splitlines()
    assert code == 3 and status.startswith("batch ") and " completed with failures in " in status
    assert counts == "1 failed, 4 ok of 5" and blank == ""
    assert header.split() == ["id", "server", "tool", "status", "time", "error"]
    by_id = {row.split()[0]: row for row in rows}
    assert set(by_id) == {call["id"] for call in example_calls()}
    assert by_id["oops"].split()[3] == "error" and by_id["oops"].count("this tool always fails") == 1
    assert by_id["nap"].split()[3] == "ok" and re.fullmatch(r"\d{3} ms", " ".join(by_id["nap"].split()[4:6]))
    code = await cli("submit", str(EXAMPLE), "--wait", "--json", "--server-url", service.base_url)
    out, err = capsys.readouterr()
    document = json.loads(out)
    assert code == 3
    assert document["status"] == "completed" and document["ok"] is False
    assert document["failed_ids"] == ["oops"]
    assert {item["id"] for item in document["results"]} == {call["id"] for call in example_calls()}
    # stderr is no terminal here: progress comes as whole lines, the last one at the end
    assert "\r" not in err
    assert err.splitlines()[-1].startswith("5/5 done, 1 failed, ")
    assert "calls/s" in err and "s elapsed" in err


async def test_submit_wait_exits_0_when_every_call_passes(
    service: ServiceHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = [call for call in example_calls() if call["tool"] != "fail"]
    path = write_json(tmp_path, {"calls": calls})
    code = await cli("submit", path, "--wait", "--json", "--server-url", service.base_url)
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["ok"] is True and document["counts"]["succeeded"] == len(calls)


async def test_submit_without_wait_prints_the_id_and_its_url(
    service: ServiceHandle, client: httpx.AsyncClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_json(tmp_path, {"calls": [{"server": "demo", "tool": "echo", "arguments": {"message": "hi"}}]})
    assert await cli("submit", path, "--server-url", service.base_url) == 0
    batch_id, url = capsys.readouterr().out.split()
    assert url == f"{service.base_url}/v1/batches/{batch_id}"
    assert (await client.get(url)).status_code == 200


async def test_a_bad_call_is_reported_by_index_and_field_and_nothing_is_sent(
    service: ServiceHandle, redis: aioredis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = [
        {"id": "a", "server": "demo", "tool": "echo"},
        {"id": "a", "server": "demo", "tool": "echo"},
        {"tool": "echo"},
        {"server": "demo", "tool": "echo", "arguments": "not an object"},
    ]
    path = write_json(tmp_path, {"calls": calls, "mode": "sideways"})
    code = await cli("submit", path, "--wait", "--server-url", service.base_url)
    err = capsys.readouterr().err
    assert code == 2
    assert "nothing was sent" in err
    assert "call 2, field 'server': Field required" in err
    assert "call 3, field 'arguments': Input should be a valid dictionary" in err
    assert "field 'mode': Input should be 'concurrent' or 'serial'" in err
    keys = Keys(service.settings.key_prefix)
    assert await redis.keys(f"{keys.prefix}:batch:*") == []
    assert not await redis.exists(keys.queue)


async def test_duplicate_ids_are_found_before_sending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls = [{"id": "x", "server": "demo", "tool": "echo"}, {"id": "x", "server": "demo", "tool": "echo"}]
    # nothing listens at this URL: exit 2, not 1, shows the file was judged before any connection
    code = await cli(
        "submit", write_json(tmp_path, {"calls": calls}), "--server-url", f"http://127.0.0.1:{free_port()}"
    )
    assert code == 2
    assert "call 1, field 'id': duplicate id: call 1 has the id of call 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b'{"calls": [{"server": "\xff"}]}', "not UTF-8 text (line 1, column 24)"),
        (
            b'{\n  "calls": [\n    {"server": "demo",}\n  ]\n}',
            "not JSON: Expecting property name enclosed in double quotes at line 3, column 23",
        ),
        (b"[1, 2]", "holds no batch: expected a JSON object with `calls`, found an array"),
    ],
    ids=["missing", "not-utf8", "not-json", "not-an-object"],
)
async def test_an_unusable_file_is_reported_with_where_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    path = tmp_path / "batch.json"
    if content is not None:
        path.write_bytes(content)
    assert await cli("submit", str(path), "--server-url", f"http://127.0.0.1:{free_port()}") == 2
    assert f"mcp-batch: {path}: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        # the model rejects fields of the very call that holds the secret
        json.dumps(
            {
                "calls": [
                    {"id": SECRET * 10, "server": "demo", "tool": [SECRET], "arguments": {"token": SECRET}},
                    {"server": "demo", "tool": "echo", "api_key": SECRET},
                    {"server": "demo", "tool": "echo", "arguments": SECRET},
                ]
            }
        ),
        # broken JSON right after the secret
        '{"calls": [{"server": "demo", "tool": "echo", "arguments": {"token": "' + SECRET + '" oops}}]}',
    ],
)
async def test_a_secret_argument_never_appears_in_local_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = tmp_path / "batch.json"
    path.write_text(text)
    assert await cli("submit", str(path), "--server-url", f"http://127.0.0.1:{free_port()}") == 2
    out, err = capsys.readouterr()
    assert "mcp-batch: " in err
    assert SECRET not in out + err


async def test_a_batch_the_server_rejects_is_reported_like_a_local_one_without_the_secret(
    service: ServiceHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # only the server knows its ceiling, so this passes the local checks and comes back as a 422
    body = {"calls": [{"server": "demo", "tool": "echo", "arguments": {"token": SECRET}}], "max_concurrency": 100_000}
    code = await cli("submit", write_json(tmp_path, body), "--server-url", service.base_url)
    out, err = capsys.readouterr()
    assert code == 2
    assert "the server rejected the batch" in err
    assert f"field 'max_concurrency': at most {service.settings.max_concurrency_ceiling}" in err
    assert SECRET not in out + err


async def test_dash_reads_the_batch_from_stdin(service: ServiceHandle) -> None:
    # a real process with a real pipe, finding the server through MCP_BATCH_SERVER_URL
    batch = {"calls": [{"id": "piped", "server": "demo", "tool": "echo", "arguments": {"message": "from stdin"}}]}
    argv = [sys.executable, "-c", "from mcp_batch_cli.commands import main; main()", "submit", "-", "--wait", "--json"]
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "MCP_BATCH_SERVER_URL": service.base_url},
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate(json.dumps(batch).encode())
    assert process.returncode == 0, err.decode()
    document = json.loads(out)
    assert document["ok"] is True
    assert document["results"][0]["content"] == [{"type": "text", "text": "from stdin"}]


async def test_submit_out_writes_one_json_line_per_item(
    service: ServiceHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = [
        {"id": f"e{n}", "server": "demo_http", "tool": "echo", "arguments": {"message": str(n)}} for n in range(3)
    ]
    calls.append({"id": "bad", "server": "demo", "tool": "fail"})
    out_file = tmp_path / "results.jsonl"
    code = await cli(
        "submit", write_json(tmp_path, {"calls": calls}), "--out", str(out_file), "--server-url", service.base_url
    )
    out = capsys.readouterr().out
    assert code == 3
    items = json_lines(out_file.read_text())
    assert sorted(item["id"] for item in items) == sorted(call["id"] for call in calls)
    assert [item["seq"] for item in items] == [1, 2, 3, 4]
    assert {item["id"]: item["status"] for item in items}["bad"] == "error"
    [summary] = out.splitlines()
    assert summary.startswith("batch ")
    assert " completed with failures in " in summary and ": 1 failed, 3 ok of 4; " in summary
    assert summary.endswith(f"4 results written to {out_file}")


async def test_get_waits_for_the_end_and_finds_the_server_from_the_environment(
    service: ServiceHandle,
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MCP_BATCH_SERVER_URL", service.base_url)
    batch = await submit(client, [{"server": "demo", "tool": "sleep", "arguments": {"seconds": 0.5}}])
    started = time.monotonic()
    assert await cli("get", batch["id"], "--wait", "30", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["id"] == batch["id"] and document["status"] == "completed" and document["ok"] is True
    assert time.monotonic() - started < 30  # answered at the end, not when the wait ran out


async def test_get_of_an_unknown_batch_says_so(service: ServiceHandle, capsys: pytest.CaptureFixture[str]) -> None:
    assert await cli("get", "no-such-batch", "--server-url", service.base_url) == 1
    err = capsys.readouterr().err
    assert f"no batch 'no-such-batch' at {service.base_url} (unknown, or expired)" in err


async def test_results_filter_by_status_and_resume_after_a_seq(
    service: ServiceHandle, client: httpx.AsyncClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = [
        {"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": "a"}},
        {"id": "b", "server": "demo", "tool": "fail"},
        {"id": "c", "server": "demo_http", "tool": "echo", "arguments": {"message": "c"}},
        {"id": "d", "server": "demo_http", "tool": "fail"},
    ]
    batch_id = (await run_batch(client, calls))["id"]
    url = ["--server-url", service.base_url]

    assert await cli("results", batch_id, *url) == 0
    every = json_lines(capsys.readouterr().out)
    assert [item["seq"] for item in every] == [1, 2, 3, 4]

    assert await cli("results", batch_id, "--status", "error", *url) == 0
    failed = json_lines(capsys.readouterr().out)
    assert sorted(item["id"] for item in failed) == ["b", "d"]
    assert {item["status"] for item in failed} == {"error"}

    assert await cli("results", batch_id, "--after", "2", *url) == 0
    assert json_lines(capsys.readouterr().out) == every[2:]

    out_file = tmp_path / "later.jsonl"
    assert await cli("results", batch_id, "--after", "1", "--status", "ok", "--out", str(out_file), *url) == 0
    expected = [item for item in every[1:] if item["status"] == "ok"]
    assert json_lines(out_file.read_text()) == expected
    assert capsys.readouterr().out == f"{len(expected)} results written to {out_file}; next: --after 4\n"


async def test_results_of_an_unknown_batch_write_no_file(
    service: ServiceHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "none.jsonl"
    assert await cli("results", "no-such-batch", "--out", str(out_file), "--server-url", service.base_url) == 1
    assert "no batch 'no-such-batch'" in capsys.readouterr().err
    assert not out_file.exists()


async def test_item_prints_one_item_whatever_its_id_holds(
    service: ServiceHandle, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ["reports/2024/q1", "100% done?", "#1 & more"]
    calls = [{"id": i, "server": "demo", "tool": "echo", "arguments": {"message": i}} for i in ids]
    batch_id = (await run_batch(client, calls))["id"]
    for call_id in ids:
        assert await cli("item", batch_id, call_id, "--json", "--server-url", service.base_url) == 0
        item = json.loads(capsys.readouterr().out)
        assert (item["id"], item["status"], item["structured_content"]) == (call_id, "ok", {"result": call_id})


async def test_item_of_an_unknown_id_says_so(
    service: ServiceHandle, client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    batch_id = (await run_batch(client, [{"id": "a", "server": "demo", "tool": "echo"}]))["id"]
    assert await cli("item", batch_id, "b/c", "--server-url", service.base_url) == 1
    assert f"no item 'b/c' in batch {batch_id!r}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["submit", "get", "results"])
async def test_an_unreachable_server_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    target = write_json(tmp_path, {"calls": [{"server": "demo", "tool": "echo"}]}) if command == "submit" else "b1"
    assert await cli(command, target, "--server-url", url) == 1
    assert f"mcp-batch: could not reach the mcp-batch server at {url} (" in capsys.readouterr().err


def test_the_progress_is_a_bar_redrawn_in_place_on_a_terminal() -> None:
    controller, terminal = pty.openpty()
    with open(terminal, "w") as stream, open(controller, "rb", buffering=0) as screen:
        progress = ProgressView(stream)
        assert progress.tty and progress.poll == 1.0
        for done, elapsed in [(0, 0.1), (10, 2.0), (40, 4.0)]:
            counts = Counts(total=40, succeeded=done, failed=1, pending=40 - done, running=0, skipped=0)
            progress.show(counts, elapsed)
        progress.close()
        shown = b""

        def drawn() -> bool:  # what the terminal has shown so far ends with the closed last line
            nonlocal shown
            if select.select([screen], [], [], 0)[0]:
                shown += screen.read(4096)
            return b"40/40 done" in shown and b"\n" in shown.split(b"40/40 done")[-1]

        eventually_blocking(drawn, what="the progress bar's last line", timeout=10)
    assert b"0/40 done, 1 failed, 0.0 calls/s, 0.1s elapsed" in shown
    assert b"40/40 done, 1 failed, 10.0 calls/s, 4.0s elapsed" in shown
    assert b"\r\x1b[2K" in shown  # each update redraws the line in place (rich's progress bar)
    assert shown.count(b"\n") == 1  # one line in all, ended when the bar closes
