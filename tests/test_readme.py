"""The README tells the truth: its example answer is what the service answers for examples/batch.json now (a real
run against the real API, worker and demo backends), and it names every MCP tool, every status and every option."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.models import BatchRequest, BatchStatus, ItemStatus
from mcp_batch.settings import Settings
from mcp_batch_cli.commands import build_parser
from service.doors.mcp.tools import BatchTools
from tests.support import finished, submit

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
EXAMPLE = json.loads((ROOT / "examples" / "batch.json").read_text())
# Fields whose values differ from run to run: the README's must only have the same type.
VOLATILE = {"id", "created_at", "started_at", "finished_at", "expires_at", "elapsed_seconds", "worker"}
VOLATILE |= {"queued_seconds", "connect_seconds", "rate_wait_seconds", "seq"}


def example_answer() -> dict[str, Any]:
    """The JSON block after the README's `<!-- example answer -->` marker."""
    found = re.search(r"<!-- example answer -->\s*```json\n(.*?)```", README, re.DOTALL)
    assert found, "the README's example answer (after <!-- example answer -->) is missing"
    answer: dict[str, Any] = json.loads(found.group(1))
    return answer


def drift(shown: Any, real: Any, where: str = "") -> list[str]:
    """Where the README's `shown` differs from the `real` answer: each field it shows must be there with the same
    value (of the same type, for a volatile one); an item is matched by its id; fields it leaves out are fine."""
    if isinstance(shown, dict) and isinstance(real, dict):
        found = []
        for key, value in shown.items():
            if key not in real:
                found.append(f"{where}.{key}: not in the answer")
            elif key in VOLATILE and not (key == "id" and where):  # an item's id is the call's own: exact
                if type(value) is not type(real[key]):
                    found.append(f"{where}.{key}: a {type(value).__name__}, not a {type(real[key]).__name__}")
            else:
                found += drift(value, real[key], f"{where}.{key}")
        return found
    if isinstance(shown, list) and isinstance(real, list) and where.endswith("results"):
        by_id = {item["id"]: item for item in real}
        return [found for item in shown for found in drift(item, by_id.get(item["id"], {}), f"{where}[{item['id']}]")]
    return [] if shown == real else [f"{where}: the README shows {shown!r}, the service answers {real!r}"]


async def test_the_readmes_example_answer_is_what_the_service_answers(client: httpx.AsyncClient) -> None:
    options = {key: value for key, value in EXAMPLE.items() if key != "calls"}
    document = await finished(client, (await submit(client, EXAMPLE["calls"], **options))["id"])
    print(json.dumps(document))
    assert drift(example_answer(), document) == []


@pytest.mark.parametrize(
    "names",
    [
        pytest.param([s.value for s in BatchStatus], id="batch statuses"),
        pytest.param([s.value for s in ItemStatus], id="item statuses"),
        pytest.param(list(BatchRequest.model_fields), id="batch options"),
        pytest.param([t.name for t in BatchTools(lambda: None, Settings(auth="none")).tools()], id="mcp tools"),  # type: ignore[arg-type, return-value]
    ],
)
def test_the_readme_names_every_one(names: list[str]) -> None:
    assert [name for name in names if f"`{name}`" not in README] == []


def test_the_readme_names_every_client_verb() -> None:
    verbs = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    client = {"submit", "get", "item", "results", "list", "cancel", "delete", "retry", "validate", "watch"}
    client |= {"questions", "answer"}
    assert client <= set(verbs)
    assert [verb for verb in sorted(client) if f"`{verb}`" not in README and f"`mcp-batch {verb} " not in README] == []
