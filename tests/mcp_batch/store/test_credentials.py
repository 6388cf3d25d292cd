"""Tenants' credentials in the real Redis: sealed at rest, per tenant, and re-sealed by a rotation."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from mcp_batch.credentials.record import Credential, CredentialKind, OAuthClient
from mcp_batch.credentials.sealing import Sealer, new_key, parse_keys
from mcp_batch.errors import ConfigError, SealBroken
from mcp_batch.keys import Keys
from mcp_batch.store.credentials import Credentials

KEYS = Keys()


def sealer(*keys: str) -> Sealer:
    return Sealer(parse_keys(SecretStr(json.dumps(list(keys)))))


async def everything_stored(redis: aioredis.Redis) -> bytes:
    dump = b""
    for key in await redis.keys("*"):
        dump += key + (await redis.dump(key) or b"")
    return dump


async def test_a_credential_is_stored_sealed_and_read_back(redis: aioredis.Redis) -> None:
    store = Credentials(redis, KEYS, sealer(new_key()))
    await store.put("acme", "github", Credential.of_secret(SecretStr("ghp-distinctive-1")))
    read = await store.get("acme", "github")
    assert read is not None and read.value() == SecretStr("ghp-distinctive-1") and read.kind is CredentialKind.secret
    assert b"ghp-distinctive-1" not in await everything_stored(redis)
    assert await store.get("other", "github") is None


async def test_oauth_tokens_and_their_client_round_trip_sealed(redis: aioredis.Redis) -> None:
    store = Credentials(redis, KEYS, sealer(new_key()))
    grant = Credential(
        kind=CredentialKind.oauth,
        access_token=SecretStr("at-distinctive"),
        refresh_token=SecretStr("rt-distinctive"),
        expires_at=2e9,
        scopes=["read"],
        client=OAuthClient(token_url="https://as.example/token", client_id="c", client_secret=SecretStr("cs-dist")),
    )
    await store.put("acme", "linear", grant)
    read = await store.get("acme", "linear")
    assert read is not None and read.refresh_token == SecretStr("rt-distinctive") and read.client is not None
    assert read.client.client_secret == SecretStr("cs-dist")
    dump = await everything_stored(redis)
    assert not any(s in dump for s in (b"at-distinctive", b"rt-distinctive", b"cs-dist"))


async def test_a_value_copied_to_another_tenant_does_not_open(redis: aioredis.Redis) -> None:
    store = Credentials(redis, KEYS, sealer(new_key()))
    await store.put("acme", "github", Credential.of_secret(SecretStr("s")))
    await redis.hset(KEYS.credentials("evil"), "github", await store.get_sealed("acme", "github") or b"")
    with pytest.raises(SealBroken):
        await store.get("evil", "github")


async def test_list_and_delete_are_per_tenant(redis: aioredis.Redis) -> None:
    store = Credentials(redis, KEYS, sealer(new_key()))
    for tenant, server in [("a", "x"), ("a", "y"), ("b", "x")]:
        await store.put(tenant, server, Credential.of_secret(SecretStr("s")))
    assert list(await store.list("a")) == ["x", "y"]
    removed = await store.delete("a", "x")
    assert removed is not None and removed.kind is CredentialKind.secret
    assert await store.delete("a", "x") is None
    assert list(await store.list("a")) == ["y"] and list(await store.list("b")) == ["x"]


async def test_rotation_reseals_under_the_first_key_so_the_old_one_can_go(redis: aioredis.Redis) -> None:
    one, two = new_key(), new_key()
    await Credentials(redis, KEYS, sealer(one)).put("a", "x", Credential.of_secret(SecretStr("v1")))
    await Credentials(redis, KEYS, sealer(one)).put("b", "y", Credential.of_secret(SecretStr("v2")))
    assert await Credentials(redis, KEYS, sealer(two, one)).rotate() == 2
    assert await Credentials(redis, KEYS, sealer(two, one)).rotate() == 0
    after = Credentials(redis, KEYS, sealer(two))
    a, b = await after.get("a", "x"), await after.get("b", "y")
    assert a is not None and a.value() == SecretStr("v1") and b is not None and b.value() == SecretStr("v2")


async def test_without_a_secrets_key_nothing_is_stored(redis: aioredis.Redis) -> None:
    with pytest.raises(ConfigError):
        await Credentials(redis, KEYS, None).put("a", "x", Credential.of_secret(SecretStr("v")))
    assert await redis.keys("*") == []
