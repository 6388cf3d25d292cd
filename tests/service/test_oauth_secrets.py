"""The secrets of connecting to an OAuth backend never come back: the authorization code, the state, the PKCE
verifier, the access and refresh tokens (those first issued and those a refresh brought) and the dynamically
registered client's secret appear in no response, log line, span, or readable Redis value, through a connect, its
callback, a replayed callback, a batch whose token is refreshed, and a revoked grant's refusals."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcp_batch.credentials.record import refresh_due
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from tests.oauth_flow import ALPHA, as_, authorize, follow_to_service, oauth_backend, oauth_settings, stored
from tests.span_sink import in_memory
from tests.support import eventually, run_batch, running_service
from worker.credentials import EXPIRY_MARGIN_SECONDS

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture
def memory() -> Iterator[InMemorySpanExporter]:
    with in_memory() as exporter:
        yield exporter


async def readable(redis: aioredis.Redis) -> str:
    """Every key and value in the test database, as Redis hands them out (sealed values stay sealed)."""
    out: list[bytes] = []
    async for key in redis.scan_iter(count=1000):
        kind = (await redis.type(key)).decode()
        out.append(key)
        if kind == "string":
            out.append(await redis.get(key) or b"")
        elif kind == "hash":
            out += [b for pair in (await redis.hgetall(key)).items() for b in pair]
        elif kind == "list":
            out += await redis.lrange(key, 0, -1)
        elif kind == "set":
            out += list(await redis.smembers(key))
        elif kind == "zset":
            out += [member for member, _ in await redis.zrange(key, 0, -1, withscores=True)]
    return b"\n".join(out).decode("latin-1")


def whoami(n: int) -> list[dict[str, Any]]:
    return [{"server": "guarded", "tool": "whoami", "arguments": {}} for _ in range(n)]


async def test_no_code_state_verifier_token_or_client_secret_leaks(
    settings: Settings,
    tmp_path: Path,
    redis: aioredis.Redis,
    memory: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[tuple[str, str]] = []
    secrets: dict[str, str] = {}
    with oauth_backend(["--access-ttl", "3"]) as guarded:
        oauth = oauth_settings(settings, tmp_path, {"guarded": {"url": guarded.url, "auth": {"type": "oauth"}}})
        async with running_service(oauth) as service, as_(service.base_url, ALPHA) as alpha:
            started = await alpha.post("/v1/credentials/guarded/connect")
            assert started.status_code == 200, started.text
            secrets["state"] = state = parse_qs(urlparse(started.json()["authorization_url"]).query)["state"][0]
            nonce = state.partition(".")[0]
            pending = stored(redis).sealer.open(await redis.get(Keys().oauth_state(state)), "", f"oauth-state:{nonce}")
            secrets["verifier"] = json.loads(pending)["verifier"]
            registered = await redis.get(Keys().oauth_client("guarded"))
            client = json.loads(stored(redis).sealer.open(registered, "", "oauth-client:guarded"))["client"]
            secrets["client secret"] = client["client_secret"]
            back = await authorize(started.json()["authorization_url"], "alice")
            secrets["code"] = parse_qs(urlparse(back).query)["code"][0]
            for label in ("callback", "replayed callback"):
                page = await follow_to_service(service.base_url, back)
                seen.append((label, f"{page.headers}\n{page.text}"))
            first = await stored(redis).get("alpha", "guarded")
            assert first is not None and first.access_token is not None and first.refresh_token is not None
            secrets["access token"] = first.access_token.get_secret_value()
            secrets["refresh token"] = first.refresh_token.get_secret_value()

            async def due() -> bool:
                return refresh_due(first, EXPIRY_MARGIN_SECONDS)

            await eventually(due, what="the token's refresh time", timeout=10)
            document = await run_batch(alpha, whoami(5))  # refreshes the token first
            assert [item["status"] for item in document["results"]] == ["ok"] * 5, document["results"][0]
            seen.append(("batch", json.dumps(document)))
            renewed = await stored(redis).get("alpha", "guarded")
            assert renewed is not None and renewed.access_token is not None and renewed.refresh_token is not None
            assert renewed.access_token != first.access_token
            secrets["refreshed access token"] = renewed.access_token.get_secret_value()
            secrets["refreshed refresh token"] = renewed.refresh_token.get_secret_value()
            guarded.revoke_account("alice")
            refused = await run_batch(alpha, whoami(2))
            assert {item["status"] for item in refused["results"]} == {"unauthenticated"}
            seen.append(("refused batch", json.dumps(refused)))
            for path in ("/v1/credentials", "/v1/servers"):
                answer = await alpha.get(path)
                seen.append((path, f"{answer.headers}\n{answer.text}"))
            deleted = await alpha.delete("/v1/credentials/guarded")
            seen.append(("delete", f"{deleted.status_code} {deleted.headers}\n{deleted.text}"))
            seen.append(("connect", started.text.replace(state, "<state>")))  # its URL carries the state by design
            at_rest = await readable(redis)
    spans = [
        (f"span {span.name}", json.dumps({**dict(span.attributes or {}), "events": [e.name for e in span.events]}))
        for span in memory.get_finished_spans()
    ]
    # the service's log lines: the test's own clients (the browser among them) use httpx, the service httpx2
    ours = [r for r in caplog.records if r.name.split(".")[0] not in ("httpx", "httpcore")]
    logs = [(f"log {r.name}", f"{r.getMessage()}\n{r.exc_text or ''}") for r in ours]
    assert logs and spans
    for name, secret in secrets.items():
        assert len(secret) >= 16, name
        for label, text in [*seen, *logs, *spans, ("redis", at_rest)]:
            assert secret not in text, f"the {name} in {label}: {text[:1000]}"
