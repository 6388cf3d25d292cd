"""The question commands and the Python client: a batch's waiting question listed and answered from the command line
(the installed `mcp-batch`) and through `AsyncClient`, against the tests' backend asking by an `input_required`
result."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from mcp_batch.client import AsyncClient, InvalidRequest
from tests.support import ServiceHandle, by_id, command_env, eventually, finished, run_command, submit

pytestmark = pytest.mark.timeout(120)

ASK = {"id": "ask", "server": "demo", "tool": "ask_round", "arguments": {"message": "Ship it?"}}


async def test_questions_are_listed_and_answered_from_the_command_line_and_the_client(
    service: ServiceHandle, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    env = command_env(MCP_BATCH_SERVER_URL=service.base_url, XDG_STATE_HOME=str(tmp_path / "state"))
    batch = await submit(client, [ASK], questions={"policy": "ask", "wait_seconds": 60.0})
    async with AsyncClient(service.base_url) as api:

        async def listed() -> list[str]:
            return [pending.item_id for pending in (await api.questions(batch["id"])).questions]

        assert await eventually(listed, what="the question listed") == ["ask"]
        with pytest.raises(InvalidRequest) as refused:
            await api.answer(batch["id"], "ask", "accept", {"go": "yes"})
        assert [p.loc for p in refused.value.problems] == [("body", "content", "go")]

    code, out, err = await run_command("questions", batch["id"], env=env)
    assert code == 0, err
    assert out.splitlines()[0].startswith("ask: elicitation until ") and out.splitlines()[0].endswith(": Ship it?")
    assert out.splitlines()[1] == "  go (boolean): "
    code, out, err = await run_command("answer", batch["id"], "ask", "accept", "--content", '{"go": false}', env=env)
    assert code == 0 and out.startswith("answered accept to item ask"), err
    done = by_id(await finished(client, batch["id"]))["ask"]
    assert done["content"][0]["text"] == 'answered accept: {"go": false}'
    code, _, err = await run_command("answer", batch["id"], "ask", "decline", env=env)
    assert code == 1 and "is not waiting for an answer" in err
