"""A batch's metadata through the real API and worker: its bounds (a 422 naming the key, never the value), the
document, the list and its filters (metadata pairs, creation time), a retry, the event stream and JSON Lines."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest
import redis.asyncio as aioredis

from tests.support import finished, run_batch, submit

pytestmark = pytest.mark.timeout(90)

ECHO = {"server": "demo", "tool": "echo"}
FAIL = {"server": "demo", "tool": "fail"}


async def test_metadata_over_its_bounds_is_a_422_naming_the_key_and_the_bound_never_the_value(
    client: httpx.AsyncClient, redis: aioredis.Redis
) -> None:
    secret = "v" * 513
    metadata = {"ok": "fine", "long": secret, "k" * 65: "x", "": "empty"}
    response = await client.post("/v1/batches", json={"calls": [ECHO], "metadata": metadata})
    assert response.status_code == 422
    assert secret not in response.text
    problems = {tuple(p["loc"]): p["msg"] for p in response.json()["detail"]}
    assert problems[("body", "metadata", "long")] == "a value is at most 512 characters; this key's has 513"
    assert "at most 64 characters" in problems[("body", "metadata", "k" * 64 + "…")]
    assert problems[("body", "metadata", "")] == "a key may not be empty"
    many = {f"key{n}": "v" for n in range(17)}
    response = await client.post("/v1/batches", json={"calls": [ECHO], "metadata": many})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "metadata"] and "maximum of 16" in response.text
    response = await client.post("/v1/batches", json={"calls": [ECHO], "metadata": {"n": 1}})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "metadata", "n"]
    assert await redis.keys("mcpb:batch:*") == []


async def test_metadata_is_in_the_document_and_the_list(client: httpx.AsyncClient) -> None:
    tags = {"job": "nightly", "owner": "ada ✓"}
    submitted = await submit(client, [ECHO], metadata=tags)
    assert submitted["metadata"] == tags
    assert (await finished(client, submitted["id"]))["metadata"] == tags
    plain = await run_batch(client, [ECHO])
    assert plain["metadata"] == {}
    listed = (await client.get("/v1/batches")).json()["batches"]
    assert [(b["id"], b["metadata"]) for b in listed] == [(plain["id"], {}), (submitted["id"], tags)]


async def test_the_list_filters_by_every_metadata_pair_given(client: httpx.AsyncClient) -> None:
    nightly_a = await submit(client, [ECHO], metadata={"job": "nightly", "team": "a"})
    nightly_b = await submit(client, [ECHO], metadata={"job": "nightly", "team": "b"})
    await submit(client, [ECHO], metadata={"job": "hourly", "team": "a"})
    await submit(client, [ECHO])

    async def ids(params: list[tuple[str, str]]) -> list[str]:
        response = await client.get("/v1/batches", params=params)
        assert response.status_code == 200, response.text
        return [b["id"] for b in response.json()["batches"]]

    assert await ids([("metadata.job", "nightly")]) == [nightly_b["id"], nightly_a["id"]]
    assert await ids([("metadata.job", "nightly"), ("metadata.team", "a")]) == [nightly_a["id"]]
    assert await ids([("metadata.job", "weekly")]) == []
    assert await ids([("metadata.job", "nightly"), ("metadata.team", "c")]) == []
    # cursor paging is as it is: a page of one, then the next
    first = (await client.get("/v1/batches", params={"metadata.job": "nightly", "limit": 1})).json()
    assert [b["id"] for b in first["batches"]] == [nightly_b["id"]]
    params = {"metadata.job": "nightly", "limit": 1, "cursor": first["next_cursor"]}
    assert [b["id"] for b in (await client.get("/v1/batches", params=params)).json()["batches"]] == [nightly_a["id"]]


async def test_the_list_filters_by_creation_time_in_rfc_3339_or_epoch_seconds(client: httpx.AsyncClient) -> None:
    older = await submit(client, [ECHO])
    middle = await submit(client, [ECHO])
    newer = await submit(client, [ECHO])
    after = datetime.fromisoformat(older["created_at"]).isoformat()  # exclusive: `older` itself is left out
    before = str(datetime.fromisoformat(newer["created_at"]).timestamp())
    params = {"created_after": after, "created_before": before}
    listed = (await client.get("/v1/batches", params=params)).json()["batches"]
    assert [b["id"] for b in listed] == [middle["id"]]
    zulu = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (await client.get("/v1/batches", params={"created_after": zulu})).json()["batches"] == []


async def test_bad_list_filters_are_a_422_naming_the_parameter(client: httpx.AsyncClient) -> None:
    params = [("created_after", "yesterday"), ("created_before", "2026-12-01T08:00:00"), ("metadata." + "k" * 65, "v")]
    response = await client.get("/v1/batches", params=params)
    assert response.status_code == 422
    locs = [tuple(p["loc"]) for p in response.json()["detail"]]
    assert locs == [("query", "metadata." + "k" * 64 + "…"), ("query", "created_after"), ("query", "created_before")]
    assert "RFC 3339" in response.text and "yesterday" not in response.text
    response = await client.get("/v1/batches", params=[("metadata.job", "a"), ("metadata.job", "b")])
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "metadata.job"]
    assert (await client.get("/v1/batches", params={"metadat.job": "a"})).status_code == 422  # still unknown


async def test_a_retry_keeps_the_metadata_unless_its_body_sets_it(client: httpx.AsyncClient) -> None:
    failed = await run_batch(client, [FAIL], metadata={"job": "nightly"})
    kept = await client.post(f"/v1/batches/{failed['id']}/retry")
    assert kept.status_code == 202 and kept.json()["metadata"] == {"job": "nightly"}
    assert kept.json()["settings_from"]["metadata"] == failed["id"]
    replaced = await client.post(f"/v1/batches/{failed['id']}/retry", json={"metadata": {"job": "rerun"}})
    assert replaced.status_code == 202 and replaced.json()["metadata"] == {"job": "rerun"}
    cleared = await client.post(f"/v1/batches/{failed['id']}/retry", json={"metadata": None})
    assert cleared.status_code == 202 and cleared.json()["metadata"] == {}
    listed = (await client.get("/v1/batches", params={"metadata.job": "nightly"})).json()["batches"]
    assert [b["id"] for b in listed] == [kept.json()["id"], failed["id"]]


async def test_the_event_stream_carries_the_metadata(client: httpx.AsyncClient) -> None:
    document = await run_batch(client, [ECHO], metadata={"job": "nightly"})
    response = await client.get(f"/v1/batches/{document['id']}/events")
    data = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert '"metadata":{"job":"nightly"}' in data[0]  # the first progress
    assert '"metadata":{"job":"nightly"}' in data[-1]  # the end


async def test_a_json_lines_upload_takes_its_metadata_in_the_query(client: httpx.AsyncClient) -> None:
    headers = {"Content-Type": "application/x-ndjson"}
    body = b'{"server": "demo", "tool": "echo"}\n'
    response = await client.post(
        "/v1/batches", content=body, headers=headers, params={"metadata.job": "nightly", "metadata.n": "8"}
    )
    assert response.status_code == 202, response.text
    assert response.json()["metadata"] == {"job": "nightly", "n": "8"}
    response = await client.post("/v1/batches", content=body, headers=headers, params={"metadata.job": "x" * 513})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "metadata.job"]
    response = await client.post("/v1/batches", json={"calls": [ECHO]}, params={"metadata.job": "nightly"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "metadata.job"]
