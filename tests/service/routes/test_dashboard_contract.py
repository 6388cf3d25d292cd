"""The dashboard's contract with the API: the status sets and count names it uses are served from the models (never
copied into its scripts), and the backends view reads JSON routes made for it, one request each."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from mcp_batch.models import FAILED_ITEM, TERMINAL_BATCH, TERMINAL_ITEM, BatchStatus, Counts
from service.routes.dashboard import UI_DIR
from tests.support import finished, submit

_EXPORT = re.compile(r"^export const (\w+) = (?:new Set\()?(\[.*\])\)?;$", re.MULTILINE)
_NAMES = (
    {status.value for status in BatchStatus} | set(TERMINAL_ITEM) | {"pending", "running"} | set(Counts.model_fields)
)


async def test_the_page_imports_the_status_sets_and_counts_of_the_models(client: httpx.AsyncClient) -> None:
    response = await client.get("/ui/statuses.js")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/javascript")
    served: dict[str, Any] = {name: json.loads(values) for name, values in _EXPORT.findall(response.text)}
    assert served["BATCH_STATUSES"] == list(BatchStatus) and set(served["TERMINAL"]) == set(TERMINAL_BATCH)
    assert set(served["FAILED"]) == set(FAILED_ITEM) and set(served["FINAL_ITEM_STATUSES"]) == set(TERMINAL_ITEM)
    assert served["FINAL_ITEM_STATUSES"][0] == "ok" and served["COUNTS"] == list(Counts.model_fields)
    for script in UI_DIR.glob("*.js"):  # a list of two or more statuses or counts in a script is a copy by hand
        for listed in re.findall(r"\[[^\[\]]*\]", script.read_text()):
            named = set(re.findall(r'"(\w+)"', listed)) & _NAMES
            assert len(named) < 2, f"{script.name} copies {sorted(named)}: import them from statuses.js"


async def test_the_overview_and_the_recent_items_answer_the_backends_view_in_one_request_each(
    client: httpx.AsyncClient,
) -> None:
    calls = [{"server": "demo_http", "tool": "echo", "arguments": {"message": str(i)}} for i in range(4)]
    older = (await finished(client, (await submit(client, calls))["id"]))["id"]
    newer = (await finished(client, (await submit(client, calls[:2]))["id"]))["id"]
    state = (await client.get("/v1/overview")).json()
    assert state["ready"] is True and state["reason"] is None and state["workers"] >= 1
    assert state["queue_depth"] >= 0 and state["unfinished_items"] == 0 and state["job_leases"] >= 0
    assert {backend["name"] for backend in state["backends"]} >= {"demo", "demo_http"}
    recent = (await client.get("/v1/recent-items", params={"batches": 2, "per_batch": 3})).json()["items"]
    assert [item["batch_id"] for item in recent] == [newer] * 2 + [older] * 3  # the newest batch first
    assert {item["index"] for item in recent[:2]} == {0, 1} and len({item["index"] for item in recent[2:]}) == 3
    assert all(item["status"] == "ok" and item["worker"] and item["server"] == "demo_http" for item in recent)
    only = (await client.get("/v1/recent-items", params={"batches": 1})).json()["items"]
    assert {item["batch_id"] for item in only} == {newer}
