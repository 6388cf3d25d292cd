"""The credential commands. `set`, `list` and `delete` act on the caller's tenant through the API (as the other
client commands do); `set` reads the secret from a prompt, or from stdin when it is not a terminal, never from an
argument, so it stays out of shell history and process lists. `new-key` prints a key for MCP_BATCH_SECRETS_KEYS;
`rotate` re-seals every stored credential under the first key, in Redis directly (the operator's command)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from typing import Any

from pydantic import SecretStr
from redis.exceptions import RedisError

from mcp_batch.credentials.sealing import Sealer, new_key
from mcp_batch.errors import ConfigError
from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store import connection, sentinel
from mcp_batch.store.credentials import Credentials
from mcp_batch_cli.client_commands import connected, print_json
from mcp_batch_cli.client_parsers import command, server_options
from mcp_batch_cli.command_errors import CommandError
from mcp_batch_cli.plain_text import one_line

_DONE = "exit codes: 0 done; 1 failed; 2 bad configuration"


def add_credential_commands(sub: Any) -> None:
    group = command(
        sub, "credentials", "the tenant's credentials for backends, and the keys they are sealed with", "", None
    )
    commands = group.add_subparsers(dest="credentials_command", required=True)

    put = command(
        commands,
        "set",
        "set the tenant's secret for a backend with `tenant` auth",
        "The secret is read from a prompt (or from stdin when it is not a terminal), never from an argument. The "
        "key needs the `credentials` right.",
        _DONE,
    )
    put.add_argument("server", help="the backend's name in the servers file")
    server_options(put)
    put.set_defaults(run=_set)

    listed = command(commands, "list", "list the tenant's credentials (never their values)", "", _DONE)
    server_options(listed, "print the list as JSON")
    listed.set_defaults(run=_list)

    delete = command(commands, "delete", "delete the tenant's credential for a backend", "", _DONE)
    delete.add_argument("server", help="the backend's name in the servers file")
    server_options(delete)
    delete.set_defaults(run=_delete)

    key = command(commands, "new-key", "print a new key for MCP_BATCH_SECRETS_KEYS (base64, 32 bytes)", "", None)
    key.set_defaults(run=_new_key)

    rotate = command(
        commands,
        "rotate",
        "re-seal every stored credential under the first key of MCP_BATCH_SECRETS_KEYS",
        "Put the new key first, keep the old ones after it, run this, then remove the old ones. Reads "
        "MCP_BATCH_REDIS_URL (and MCP_BATCH_DATA_REDIS_URL) as the service does.",
        _DONE,
    )
    rotate.set_defaults(run=_rotate)


def _read_secret() -> SecretStr:
    tty = sys.stdin.isatty()
    secret = getpass.getpass("secret (not shown): ") if tty else sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise CommandError("no secret was given")
    return SecretStr(secret)


def _set(args: argparse.Namespace) -> int:
    secret = _read_secret()
    with connected(args) as client:
        client.set_credential(args.server, secret)
    print(f"set the credential for {one_line(args.server)}")
    return 0


def _list(args: argparse.Namespace) -> int:
    with connected(args) as client:
        held = client.credentials()
    if args.json:
        print_json({"credentials": [info.model_dump(mode="json") for info in held]})
        return 0
    if not held:
        print("no credentials are set")
    for info in held:
        extra = ""
        if info.kind == "oauth":
            state = "needs connect" if info.needs_connect else f"expires {info.expires_at}"
            extra = f", {state}, scopes: {' '.join(info.scopes or []) or '-'}"
        print(one_line(f"{info.server}: {info.kind}, set {info.set_at}{extra}"))
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connected(args) as client:
        client.delete_credential(args.server)
    print(f"deleted the credential for {one_line(args.server)}")
    return 0


def _new_key(_: argparse.Namespace) -> int:
    print(new_key())
    return 0


def _rotate(_: argparse.Namespace) -> int:
    settings = Settings()
    sealer = Sealer.from_setting(settings.secrets_keys)
    if sealer is None:
        raise ConfigError("MCP_BATCH_SECRETS_KEYS is not set: give the new key first and the old ones after it")
    try:
        count = asyncio.run(_reseal(settings, sealer))
    except (RedisError, OSError) as exc:
        raise CommandError(f"could not reach Redis: {type(exc).__name__}") from None
    print(f"re-sealed {count} credential(s) under the first key; keys after it can now be removed")
    return 0


async def _reseal(settings: Settings, sealer: Sealer) -> int:
    redis = sentinel.client(settings.redis_url)
    data = redis
    try:
        data = await connection.data_client(settings, redis)
        return await Credentials(data, Keys(settings.key_prefix), sealer).rotate()
    finally:
        await connection.close_data(data, redis)
        await connection.close(redis)
