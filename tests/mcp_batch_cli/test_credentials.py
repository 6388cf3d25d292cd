"""The credential commands as a user runs them (the installed `mcp-batch`): the secret from stdin, never an argument;
list and delete; a new key; a rotation that lets the old key go."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from mcp_batch.credentials.record import Credential
from mcp_batch.credentials.sealing import Sealer, new_key, parse_keys
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store.credentials import Credentials
from tests.conftest import REDIS_URL
from tests.support import HttpBackendProcess, ServiceHandle, command_env, run_command

pytestmark = pytest.mark.timeout(90)

SECRET = "tok-cli-SEKRET-8d1f"


@pytest.fixture
def servers(servers: dict[str, Any], http_backend: HttpBackendProcess) -> dict[str, Any]:
    servers["who"] = {"url": http_backend.url, "auth": {"type": "tenant"}}
    return servers


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"secrets_keys": SecretStr(json.dumps([new_key()]))})


def sealer(*keys: str) -> Sealer:
    return Sealer(parse_keys(SecretStr(json.dumps(list(keys)))))


async def test_set_reads_the_secret_from_stdin_then_list_and_delete(service: ServiceHandle) -> None:
    env = command_env()
    url = ["--server-url", service.base_url]
    code, out, err = await run_command("credentials", "set", "who", *url, env=env, stdin=f"{SECRET}\n".encode())
    assert code == 0, err
    assert SECRET not in out + err
    code, out, err = await run_command("credentials", "list", "--json", *url, env=env)
    assert code == 0, err
    (held,) = json.loads(out)["credentials"]
    assert held["server"] == "who" and held["kind"] == "secret" and SECRET not in out
    assert (await run_command("credentials", "delete", "who", *url, env=env))[0] == 0
    code, out, _ = await run_command("credentials", "list", *url, env=env)
    assert code == 0 and "no credentials are set" in out
    code, _, err = await run_command("credentials", "set", "who", *url, env=env, stdin=b"\n")
    assert code == 1 and "no secret" in err


async def test_new_key_prints_a_base64_32_byte_key() -> None:
    code, out, _ = await run_command("credentials", "new-key", env=command_env())
    assert code == 0 and len(base64.b64decode(out.strip(), validate=True)) == 32


async def test_rotate_reseals_everything_so_the_old_key_can_go(redis: aioredis.Redis) -> None:
    old, new = new_key(), new_key()
    await Credentials(redis, Keys(), sealer(old)).put("acme", "who", Credential.of_secret(SecretStr(SECRET)))
    env = command_env(MCP_BATCH_REDIS_URL=REDIS_URL, MCP_BATCH_SECRETS_KEYS=json.dumps([new, old]))
    code, out, err = await run_command("credentials", "rotate", env=env)
    assert code == 0 and "re-sealed 1 credential" in out, err
    opened = await Credentials(redis, Keys(), sealer(new)).get("acme", "who")
    assert opened is not None and opened.value() == SecretStr(SECRET)
    code, _, err = await run_command("credentials", "rotate", env=command_env(MCP_BATCH_REDIS_URL=REDIS_URL))
    assert code == 2 and "MCP_BATCH_SECRETS_KEYS" in err
