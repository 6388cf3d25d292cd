"""POST /mcp/tools/call end to end: real API, real worker, real Redis, real demo backends over stdio and HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_batch.settings import Settings
from mcp_batch.tenants import hash_key
from tests.support import HttpBackendProcess, finished, running_service, start_http_backend

pytestmark = pytest.mark.timeout(90)

TOKEN = "right-token"
SECRET = "s3cret-value-that-must-not-come-back"


@pytest.fixture(scope="module")
def locked_backend() -> Iterator[HttpBackendProcess]:
    """The demo backend over HTTP, answering 401 unless sent `Bearer right-token`."""
    backend = start_http_backend(extra_args=["--require-token", TOKEN])
    yield backend
    backend.stop()


@pytest.fixture
def servers(servers: dict[str, Any], locked_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["locked"] = {"url": locked_backend.url, "headers": {"Authorization": "Bearer wrong-token"}}
    return servers


@pytest.fixture
async def impatient(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a service whose synchronous door waits only half a second."""
    async with (
        running_service(settings.model_copy(update={"sync_wait_seconds": 0.5})) as handle,
        httpx.AsyncClient(base_url=handle.base_url, timeout=30) as http,
    ):
        yield http


def call(server_id: str, tool_name: str, **arguments: Any) -> dict[str, Any]:
    return {"server_id": server_id, "tool_name": tool_name, "arguments": arguments}


async def post_calls(client: httpx.AsyncClient, calls: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    return await client.post("/mcp/tools/call", json={"calls": calls, **extra})


async def test_all_calls_succeeding_answer_200_with_their_content(client: httpx.AsyncClient) -> None:
    response = await post_calls(
        client,
        [
            {"ref": "stdio", **call("demo", "echo", message="hi")},
            {"ref": "http", **call("demo_http", "echo", message="yo")},
        ],
        team_id="team-1",
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "results": [
            {"ref": "stdio", "server_id": "demo", "tool_name": "echo", "status": "success",
             "content": [{"type": "text", "text": "hi"}], "error": None},
            {"ref": "http", "server_id": "demo_http", "tool_name": "echo", "status": "success",
             "content": [{"type": "text", "text": "yo"}], "error": None},
        ]
    }  # fmt: skip


async def test_a_success_and_a_failure_answer_207(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [call("demo_http", "echo", message="hi"), call("demo_http", "fail")])
    assert response.status_code == 207, response.text
    ok, failed = response.json()["results"]
    assert ok["status"] == "success" and ok["error"] is None
    assert failed["status"] == "error" and failed["content"] is None
    assert failed["error"]["code"] == "tool_error" and failed["error"]["type"] == "tool"
    assert set(failed["error"]) == {"code", "message", "type", "param", "details"}


async def test_all_calls_failing_answer_200(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [call("demo_http", "fail"), call("demo_http", "fail", reason="again")])
    assert response.status_code == 200, response.text
    assert [r["status"] for r in response.json()["results"]] == ["error", "error"]


async def test_an_unknown_server_is_an_error_result(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [call("nowhere", "echo")])
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    assert result["status"] == "error" and result["server_id"] == "nowhere"
    assert result["error"]["code"] == "unknown_server" and result["error"]["param"] is None


async def test_a_backend_refusing_the_credentials_is_unauthenticated(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [call("locked", "echo", message="hi"), call("demo_http", "echo")])
    assert response.status_code == 207, response.text
    locked, ok = response.json()["results"]
    assert ok["status"] == "success"
    assert locked["status"] == "unauthenticated", locked["error"]
    assert locked["error"]["code"] == "backend_unauthenticated"
    assert "wrong-token" not in response.text


async def test_refs_default_to_indexes_and_are_echoed(client: httpx.AsyncClient) -> None:
    calls = [{"ref": "first", **call("demo_http", "echo")}, call("demo_http", "echo"), call("demo_http", "fail")]
    response = await post_calls(client, calls)
    assert response.status_code == 207, response.text
    results = response.json()["results"]
    assert [(r["ref"], r["tool_name"]) for r in results] == [("first", "echo"), ("1", "echo"), ("2", "fail")]


async def test_more_calls_than_the_limit_answer_400_naming_it(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [call("demo_http", "echo") for _ in range(6)])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["type"] == "invalid_request_error"
    assert error["param"] == "calls" and "maximum of 5" in error["message"]


async def test_no_calls_answer_400(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [])
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "calls"


async def test_a_missing_tool_name_answers_400_naming_the_field(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [{"server_id": "demo_http"}])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "calls.0.tool_name"
    assert error["details"]["problems"] == [
        {"param": "calls.0.tool_name", "message": "Field required", "type": "missing"}
    ]


async def test_a_malformed_call_never_echoes_its_arguments(client: httpx.AsyncClient) -> None:
    calls = [
        {"server_id": "demo_http", "tool_name": 7, "arguments": {"token": SECRET}},
        {"server_id": "demo_http", "tool_name": "echo", "arguments": SECRET},
        {"server_id": "demo_http", "tool_name": "echo", "arguments": {"token": SECRET}, "extra": SECRET},
    ]
    response = await post_calls(client, calls)
    assert response.status_code == 400, response.text
    assert SECRET not in response.text
    params = [p["param"] for p in response.json()["error"]["details"]["problems"]]
    assert params == ["calls.0.tool_name", "calls.1.arguments", "calls.2.extra"]


async def test_a_ref_repeated_by_a_default_answers_400(client: httpx.AsyncClient) -> None:
    response = await post_calls(client, [{"ref": "1", **call("demo_http", "echo")}, call("demo_http", "echo")])
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "calls.1.ref"


async def test_a_body_that_is_not_json_answers_400(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/mcp/tools/call", content=b'{"calls": [', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] is None


async def test_calls_outliving_the_wait_answer_504_with_the_batch_location(impatient: httpx.AsyncClient) -> None:
    response = await post_calls(impatient, [call("demo_http", "sleep", seconds=3)])
    assert response.status_code == 504, response.text
    body = response.json()
    assert body["error"]["code"] == "timeout"
    assert body["location"] == response.headers["location"] == f"/v1/batches/{body['batch_id']}"
    document = await finished(impatient, body["batch_id"])  # the batch went on without the caller
    assert document["ok"] is True


async def test_the_openapi_document_describes_the_request_and_the_answers(client: httpx.AsyncClient) -> None:
    operation = (await client.get("/openapi.json")).json()["paths"]["/mcp/tools/call"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["calls"]
    assert set(schema["properties"]["calls"]["items"]["properties"]) == {"ref", "server_id", "tool_name", "arguments"}
    assert {"200", "207", "400", "504"} <= set(operation["responses"])


WRITER, READER = "mcpb_gumloop-writer", "mcpb_gumloop-reader"


@pytest.fixture
async def keyed(settings: Settings, tmp_path: Path) -> AsyncIterator[str]:
    """A service with auth on: a key with `write`, and one without it limited to demo_http (its base URL)."""
    keys = [
        {"sha256": hash_key(WRITER), "tenant": "team-1", "write": True},
        {"sha256": hash_key(READER), "tenant": "team-1", "servers": ["demo_http"]},
    ]
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys}))
    async with running_service(settings.model_copy(update={"auth": "keys", "keys": path})) as handle:
        yield handle.base_url


def as_key(base_url: str, key: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30)


async def test_a_key_without_write_runs_the_read_only_calls_and_the_others_are_blocked(keyed: str) -> None:
    calls = [
        {"ref": "read", **call("demo_http", "echo", message="hi")},
        {"ref": "write", **call("demo_http", "write", key="k")},
    ]
    async with as_key(keyed, READER) as reader:
        response = await post_calls(reader, calls)
    assert response.status_code == 207, response.text
    read, write = response.json()["results"]
    assert read["status"] == "success"
    assert write["status"] == "error" and write["error"]["code"] == "not_read_only" and write["content"] is None
    async with as_key(keyed, WRITER) as writer:
        response = await post_calls(writer, calls)
    assert response.status_code == 200, response.text
    assert [r["status"] for r in response.json()["results"]] == ["success", "success"]


async def test_401_and_403_take_gumloops_error_shape(keyed: str) -> None:
    for key in (None, "mcpb_not-a-key"):
        async with as_key(keyed, key) as stranger:
            response = await post_calls(stranger, [call("demo_http", "echo")])
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        error = response.json()["error"]
        assert error["code"] == "unauthenticated" and error["type"] == "authentication_error" and error["message"]
        assert "detail" not in response.json()
    async with as_key(keyed, READER) as reader:
        not_mine = await post_calls(reader, [call("demo_http", "echo"), call("demo", "echo")])
        other_team = await post_calls(reader, [call("demo_http", "echo")], team_id="team-2")
    for response, param in ((not_mine, "calls.1.server_id"), (other_team, "team_id")):
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["code"] == "forbidden" and error["type"] == "permission_error" and error["param"] == param
        assert error["details"]["problems"][0]["param"] == param


async def test_the_openapi_document_gives_gumloops_shape_for_401_and_403(client: httpx.AsyncClient) -> None:
    responses = (await client.get("/openapi.json")).json()["paths"]["/mcp/tools/call"]["post"]["responses"]
    for status in ("400", "401", "403"):
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith("/GumloopErrorResponse"), status
