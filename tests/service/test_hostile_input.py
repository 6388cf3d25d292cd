"""Hostile bodies, query strings and paths get a clear 4xx through the real app, never a 5xx, and echo no value."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from mcp_batch.keys import Keys
from mcp_batch.models import BatchRequest
from service.bodies.strict_json import MalformedJSON, strict_loads
from service.doors.gumloop import GumloopRequest
from tests.support import run_batch

pytestmark = pytest.mark.timeout(90)

JSON = {"content-type": "application/json"}
CALL = b'{"server": "demo", "tool": "echo"}'
SECRET = "hostile-SEKRET-5e2b"


def batch(**fields: bytes) -> bytes:
    """A batch body with raw JSON text for some fields (to send what json.dumps never would)."""
    parts = [b'"calls": [' + CALL + b"]"] + [b'"%s": %s' % (name.encode(), raw) for name, raw in fields.items()]
    return b"{" + b", ".join(parts) + b"}"


def arguments(raw: bytes) -> bytes:
    """A batch whose one call's arguments hold `raw` JSON text, beside a value that must never come back."""
    prefix = b'{"calls": [{"server": "demo", "tool": "echo", "arguments": {"token": "%s", "message": ' % SECRET.encode()
    return prefix + raw + b"}}]}"


async def assert_nothing_stored(redis: aioredis.Redis) -> None:
    assert await redis.keys("mcpb:batch:*") == []


MALFORMED = [
    ("100k-open-brackets", b"[" * 100_000, "nested deeper than 64 levels"),
    ("100k-nested-arrays", b'{"calls": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper"),
    ("deep-arguments", arguments(b'{"a": ' * 70 + b"1" + b"}" * 70), "nested deeper than 64 levels"),
    ("not-utf8", b'{"calls": [{"server": "\xff\xfe", "tool": "echo"}]}', "not UTF-8"),
    ("utf8-bom", b"\xef\xbb\xbf" + batch(), "Unexpected UTF-8 BOM"),
    ("utf16", batch().decode().encode("utf-16"), "not UTF-8"),
    ("invalid", b"{not json", "Expecting property name"),
    ("truncated", b'{"calls": [' + CALL, "Expecting"),
    ("nan", arguments(b"NaN"), "NaN is not a JSON number"),
    ("infinity", batch(deadline_seconds=b"Infinity"), "Infinity is not a JSON number"),
    ("minus-infinity", batch(deadline_seconds=b"-Infinity"), "-Infinity is not a JSON number"),
    ("float-overflow", batch(max_concurrency=b"1e400"), "too large to represent"),
    ("5000-digit-int", batch(max_concurrency=b"9" * 5_000), "too many digits"),
    ("5000-digit-argument", arguments(b"-" + b"1" * 5_000), "too many digits"),
    ("duplicate-top-level-key", b'{"calls": [' + CALL + b'], "calls": []}', "same key twice"),
    ("duplicate-argument-key", arguments(b'{"k": 1, "k": 2}'), "same key twice"),
    ("lone-surrogate", arguments(b'"\\ud800"'), "unpaired UTF-16 surrogate"),
    ("lone-surrogate-key", arguments(b'{"\\udfff": 1}'), "unpaired UTF-16 surrogate"),
]


@pytest.mark.parametrize("path", ["/v1/batches", "/v1/batches:validate"])
async def test_a_body_that_is_not_acceptable_json_is_422_saying_why(
    client: httpx.AsyncClient, redis: aioredis.Redis, path: str
) -> None:
    for case, body, reason in MALFORMED:
        response = await client.post(path, content=body, headers=JSON)
        assert response.status_code == 422, (case, response.text)
        [problem] = response.json()["detail"]
        assert problem["type"] == "json_invalid" and problem["loc"][0] == "body", case
        assert reason in problem["msg"], (case, problem)
        assert SECRET not in response.text
    await assert_nothing_stored(redis)


# Faults of a call's arguments, for `deep_inside`
ARGUMENT_FAULTS = [
    ("nan", b"NaN", "NaN is not a JSON number"),
    ("float-overflow", b"1e400", "too large to represent"),
    ("5000-digit-argument", b"-" + b"1" * 5_000, "too many digits"),
    ("duplicate-argument-key", b'{"k": 1, "k": 2}', "same key twice"),
    ("lone-surrogate", b'"\\ud800"', "unpaired UTF-16 surrogate"),
    ("lone-surrogate-key", b'{"\\udfff": 1}', "unpaired UTF-16 surrogate"),
    ("deep-arguments", b'{"a": ' * 70 + b"1" + b"}" * 70, "nested deeper than 64 levels"),
    ("truncated", b'{"k": 1', "Expecting"),
]


def deep_inside(raw: bytes) -> bytes:
    """A 5,000-call batch, read off the event loop a piece at a time, whose call 4,000 has `raw` JSON text in its
    arguments beside a value that must never come back."""
    calls = [b'{"server": "demo", "tool": "echo", "arguments": {"message": "m%d"}}' % i for i in range(5_000)]
    calls[4_000] = b'{"server": "demo", "tool": "echo", "arguments": {"token": "%s", "message": %s}}' % (
        SECRET.encode(),
        raw,
    )
    return b'{"calls": [' + b", ".join(calls) + b'], "mode": "concurrent"}'


async def test_a_fault_deep_in_a_large_body_is_the_same_422_as_in_a_small_one(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    for case, raw, reason in ARGUMENT_FAULTS:
        body = deep_inside(raw)
        response = await client.post("/v1/batches", content=body, headers=JSON)
        assert response.status_code == 422, (case, response.text)
        [problem] = response.json()["detail"]
        assert problem["type"] == "json_invalid" and reason in problem["msg"], (case, problem)
        with pytest.raises(MalformedJSON) as strict:
            strict_loads(body, 64)
        assert problem["loc"] == ["body", strict.value.pos], case  # where the strict parser stopped
        assert SECRET not in response.text
    await assert_nothing_stored(redis)


async def test_an_integer_over_64_bits_deep_in_a_large_body_is_stored_exactly(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    response = await client.post("/v1/batches", content=deep_inside(b"-123456789012345678901234567890"), headers=JSON)
    assert response.status_code == 202, response.text
    stored = json.loads(await redis.lindex(Keys().calls(response.json()["id"]), 4_000))
    assert stored["arguments"] == {"token": SECRET, "message": -123456789012345678901234567890}


async def test_the_gumloop_door_answers_400_for_the_same_bodies(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    for case, body, reason in MALFORMED:
        response = await client.post("/mcp/tools/call", content=body, headers=JSON)
        assert response.status_code == 400, (case, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_request", case
        assert reason in error["message"], (case, error)
        assert SECRET not in response.text
    await assert_nothing_stored(redis)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
)
@pytest.mark.parametrize("path", ["/v1/batches", "/v1/batches:validate"])
async def test_a_body_that_is_not_sent_as_json_is_415(
    client: httpx.AsyncClient, redis: aioredis.Redis, path: str, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = await client.post(path, content=batch(), headers=headers)
    assert response.status_code == 415
    assert response.json() == {"detail": "the body must be JSON, sent with Content-Type: application/json"}
    await assert_nothing_stored(redis)


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "application/vnd.batch+json"])
async def test_json_content_types_with_parameters_or_suffixes_are_taken(
    client: httpx.AsyncClient, content_type: str
) -> None:
    response = await client.post("/v1/batches", content=batch(), headers={"content-type": content_type})
    assert response.status_code == 202, response.text


async def test_numbers_too_large_for_their_field_are_422(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    huge = {
        "deadline_seconds": b"1e308",  # found by the fuzz run: the deadline's timestamp overflowed (a 500)
        "max_concurrency": b"9" * 4_000,
        "retention_seconds": b"1" + b"0" * 30,
        "response_max_bytes": b"1e300",
    }
    for field, raw in huge.items():
        response = await client.post("/v1/batches", content=batch(**{field: raw}), headers=JSON)
        assert response.status_code == 422, (field, response.text)
        assert response.json()["detail"][0]["loc"][-1] == field
    calls = b'{"calls": [{"server": "demo", "tool": "echo", "timeout_seconds": 1e308}]}'
    response = await client.post("/v1/batches", content=calls, headers=JSON)
    assert response.status_code == 422
    await assert_nothing_stored(redis)


async def test_an_empty_body_is_a_missing_body(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/batches")
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "missing"


def models_within(model: type[BaseModel]) -> set[type[BaseModel]]:
    """`model` and every model its fields hold, at any depth."""
    found, todo = set(), [model]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        for field in current.model_fields.values():
            for kind in [field.annotation, *getattr(field.annotation, "__args__", ())]:
                for inner in [kind, *getattr(kind, "__args__", ())]:
                    if isinstance(inner, type) and issubclass(inner, BaseModel):
                        todo.append(inner)
    return found


@pytest.mark.parametrize("model", [BatchRequest, GumloopRequest])
def test_every_request_model_forbids_unknown_fields(model: type[BaseModel]) -> None:
    within = models_within(model)
    assert len(within) == (3 if model is BatchRequest else 2)  # the request and its call (and its questions setting)
    assert all(m.model_config.get("extra") == "forbid" for m in within), within


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"calls": [{"server": "demo", "tool": "echo"}], SECRET: 1}, ["body", SECRET]),
        ({"calls": [{"server": "demo", "tool": "echo", "unknown": SECRET}]}, ["body", "calls", 0, "unknown"]),
    ],
)
async def test_unknown_fields_are_422_naming_them(
    client: httpx.AsyncClient, body: dict[str, Any], loc: list[Any]
) -> None:
    response = await client.post("/v1/batches", json=body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == loc
    assert response.json()["detail"][0]["type"] == "extra_forbidden"


@pytest.mark.parametrize("call", [{"ref": "a", "server_id": "demo", "tool_name": "echo", "x": 1}])
async def test_unknown_fields_at_the_gumloop_door_are_400(client: httpx.AsyncClient, call: dict[str, Any]) -> None:
    for body in ({"calls": [call]}, {"calls": [{**call, "x": None} | {}], "extra": 1}):
        response = await client.post("/mcp/tools/call", json=body)
        assert response.status_code == 400
        assert any(p["type"] == "extra_forbidden" for p in response.json()["error"]["details"]["problems"])


@pytest.mark.parametrize(
    ("call_id", "named"),
    [
        ("a\x00b", "U+0000"),
        ("tab\there", "U+0009"),
        ("line\nbreak", "U+000A"),
        ("del\x7f", "U+007F"),
        ("\x1b[31mred", "U+001B"),
        ("next\x85line", "U+0085"),  # C1 controls are controls too
        ("csi\x9b31m", "U+009B"),
        ("line\u2028separator", "U+2028"),
        ("paragraph\u2029separator", "U+2029"),
    ],
)
async def test_ids_with_control_characters_or_line_separators_are_422_naming_the_character(
    client: httpx.AsyncClient, call_id: str, named: str
) -> None:
    calls = [{"id": "fine", "server": "demo", "tool": "echo"}, {"id": call_id, "server": "demo", "tool": "echo"}]
    response = await client.post("/v1/batches", json={"calls": calls})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "calls", 1, "id"]
    assert problem["msg"].startswith("an id may not contain control characters or line separators")
    assert named in problem["msg"]
    assert call_id not in response.text


async def test_a_nine_mebibyte_id_is_a_quick_422(client: httpx.AsyncClient, redis: aioredis.Redis) -> None:
    body = b'{"calls": [{"id": "' + b"i" * (9 << 20) + b'", "server": "demo", "tool": "echo"}]}'
    async with asyncio.timeout(20):
        response = await client.post("/v1/batches", content=body, headers=JSON)
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "string_too_long"
    assert len(response.content) < 1_000
    await assert_nothing_stored(redis)


async def test_a_nine_mebibyte_argument_refuses_the_batch_before_it_is_stored(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    used_before = await database_bytes(redis)
    async with asyncio.timeout(60):
        for _ in range(10):
            response = await client.post("/v1/batches", content=arguments(b'"' + b"a" * (9 << 20) + b'"'), headers=JSON)
            assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "calls", 0, "arguments"] and problem["type"] == "too_large"
    assert "over the bound of 20000 (MCP_BATCH_MAX_ARGUMENT_BYTES)" in problem["msg"]
    assert SECRET not in response.text and len(response.content) < 1_000
    await assert_nothing_stored(redis)
    assert await database_bytes(redis) - used_before < 1 << 20  # ten 9 MiB arguments: none kept


async def database_bytes(redis: aioredis.Redis) -> int:
    """What this test database's keys take (the server is shared with other test workers' databases)."""
    return sum([await redis.memory_usage(key, samples=0) or 0 async for key in redis.scan_iter(count=1000)])


async def test_a_call_just_within_the_argument_bound_is_taken(client: httpx.AsyncClient) -> None:
    call = {"server": "demo", "tool": "echo", "arguments": {"message": "a" * (20_000 - len('{"message":""}'))}}
    assert (await client.post("/v1/batches", json={"calls": [call]})).status_code == 202
    call["arguments"]["message"] += "a"
    response = await client.post("/v1/batches", json={"calls": [{"server": "demo", "tool": "echo"}, call]})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "calls", 1, "arguments"]


GET_QUERIES = [
    "wait=-1",
    "wait=61",
    "wait=NaN",
    "wait=inf",
    "wait=1e400",
    "wait=" + "9" * 5_000,
    "offset=-1",
    "offset=2147483648",
    "offset=" + "9" * 30,
    "offset=" + "9" * 5_000,
    "offset=1.5",
    "limit=10001",
    "limit=-1",
    "limit=x",
]
RESULTS_QUERIES = ["after=-1", "after=x", "status=nope", "status=ok,,error", "status=%00", "after=" + "9" * 5_000]


async def test_query_parameters_out_of_range_are_422(client: httpx.AsyncClient) -> None:
    batch_id = (await run_batch(client, [{"id": "a", "server": "demo", "tool": "echo"}]))["id"]
    for query in GET_QUERIES:
        response = await client.get(f"/v1/batches/{batch_id}?{query}")
        assert response.status_code == 422, (query, response.text)
        assert response.json()["detail"][0]["loc"][:2] == ["query", query.split("=")[0]]
    for query in RESULTS_QUERIES:
        response = await client.get(f"/v1/batches/{batch_id}/results?{query}")
        assert response.status_code == 422, (query, response.text)
    for cursor in ["x", "1", "-1.0", "1.2.3", "%00"]:
        response = await client.get(f"/v1/batches/{batch_id}/items/a?cursor={cursor}")
        assert response.status_code == 422, (cursor, response.text)


async def test_a_made_up_cursor_is_422_naming_it_without_echoing_it(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [{"id": "a", "server": "demo", "tool": "echo", "arguments": {"message": "m"}}])
    for cursor in ["99999999999999999999999", "A" * 94, "0_9-" * 20]:
        response = await client.get(f"/v1/batches/{document['id']}/items/a?cursor={cursor}")
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["query", "cursor"] and cursor not in response.text


ROUTES = [
    ("GET", "/v1/batches/{}"),
    ("GET", "/v1/batches/{}?wait=0.1"),
    ("GET", "/v1/batches/{}/results"),
    ("GET", "/v1/batches/{}/items/0"),
    ("POST", "/v1/batches/{}/cancel"),
    ("POST", "/v1/batches/{}/retry"),
]


async def test_odd_batch_ids_are_404(client: httpx.AsyncClient) -> None:
    for odd in ["%00", "%ff", "%E2%80%AE", "a" * 8_000, "..", "*", "x%0Ay", "%7B%7D", "-", "a" * 65]:
        for method, template in ROUTES:
            response = await client.request(method, template.format(odd))
            assert response.status_code == 404, (method, template, odd[:20], response.text[:200])


async def test_an_id_naming_another_key_of_a_real_batch_is_404(client: httpx.AsyncClient) -> None:
    batch_id = (await run_batch(client, [{"server": "demo", "tool": "fail"}]))["id"]
    for suffix in [":calls", ":results", ":finished", ":ids", ":failed", ":inflight", ":orphans", "%3Acalls"]:
        for method, template in ROUTES:
            response = await client.request(method, template.format(batch_id + suffix))
            assert response.status_code == 404, (method, template, suffix, response.text)


ODD_BUT_FINE_IDS = ["a/b", "/lead", "trail/", "a//b", "%2F", "100%", "q?x#y", "sp ace", "ünï/çødé", "a\\b", "+&=;"]


async def test_every_accepted_id_can_be_fetched_by_it(client: httpx.AsyncClient) -> None:
    calls = [{"id": call_id, "server": "demo", "tool": "echo"} for call_id in ODD_BUT_FINE_IDS]
    batch_id = (await run_batch(client, calls))["id"]
    for call_id in ODD_BUT_FINE_IDS:
        response = await client.get(f"/v1/batches/{batch_id}/items/{quote(call_id, safe='')}")
        assert response.status_code == 200, (call_id, response.text)
        assert response.json()["id"] == call_id
    for call_id in ("a/b", "a//b", "trail/"):  # a slash sent as is (a proxy may decode %2F) reaches the same item
        response = await client.get(f"/v1/batches/{batch_id}/items/{call_id}")
        assert response.status_code == 200 and response.json()["id"] == call_id


async def test_odd_item_ids_are_404(client: httpx.AsyncClient) -> None:
    batch_id = (await run_batch(client, [{"server": "demo", "tool": "echo"}]))["id"]
    for item in ["%00", "a" * 8_000, "%ff", "x:y", "1"]:
        response = await client.get(f"/v1/batches/{batch_id}/items/{item}")
        assert response.status_code == 404


MCP_HEADERS = {"accept": "application/json, text/event-stream", **JSON}


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"[" * 100_000, MCP_HEADERS),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "\xff"}}', MCP_HEADERS),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}', MCP_HEADERS),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "\\ud800"}}', MCP_HEADERS),
        (b'{"jsonrpc": "2.0", "id": ' + b"9" * 5_000 + b', "method": "ping"}', MCP_HEADERS),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            {"accept": MCP_HEADERS["accept"], "content-type": "text/plain"},
        ),
        (b"{not json", MCP_HEADERS),
    ],
)
async def test_the_mcp_front_door_answers_hostile_bodies_with_4xx(
    client: httpx.AsyncClient, body: bytes, headers: dict[str, str]
) -> None:
    response = await client.post("/mcp", content=body, headers=headers)
    assert response.status_code < 500, response.text  # the SDK's own parser: NaN in a ping's params is a ping


async def test_an_mcp_get_batch_with_an_odd_id_or_offset_is_a_tool_error(client: httpx.AsyncClient) -> None:
    for arguments, says in (
        ({"batch_id": "x:calls"}, "no batch with that id"),
        ({"batch_id": "a" * 8_000}, "no batch with that id"),
        ({"batch_id": "abc", "offset": 2**40}, "offset: Input should be less than or equal to 2147483647"),
    ):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_batch", "arguments": arguments},
        }
        response = await client.post("/mcp", json=body, headers=MCP_HEADERS)
        assert response.status_code == 200
        [result] = [json.loads(line[6:])["result"] for line in response.text.splitlines() if line.startswith("data: ")]
        assert result["isError"] is True and says in result["content"][0]["text"], result


async def test_unknown_query_parameters_are_422_naming_them(client: httpx.AsyncClient) -> None:
    batch_id = (await run_batch(client, [{"id": "a", "server": "demo", "tool": "echo"}]))["id"]
    for path in (
        f"/v1/batches/{batch_id}",
        "/v1/batches",
        f"/v1/batches/{batch_id}/results",
        f"/v1/batches/{batch_id}/events",
    ):
        response = await client.get(path, params={"limt": 5})
        assert response.status_code == 422, path
        assert response.json()["detail"] == [
            {"loc": ["query", "limt"], "msg": "an unknown query parameter", "type": "extra_forbidden"}
        ]
    assert (await client.get(f"/v1/batches/{batch_id}/results", params={"status": ""})).status_code == 422


async def test_a_405_names_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    response = await client.request("PUT", "/v1/batches")
    assert response.status_code == 405 and response.headers["allow"] == "GET, POST"  # not only the first route's
