"""Sealing: AES-256-GCM bound to (tenant, server), keys that rotate, and errors that never show a key."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import SecretStr

from mcp_batch.credentials.sealing import Sealer, new_key, parse_keys
from mcp_batch.errors import ConfigError, SealBroken


def keys(*encoded: str) -> SecretStr:
    return SecretStr(json.dumps(list(encoded)))


def test_a_sealed_value_opens_for_its_tenant_and_server_only() -> None:
    sealer = Sealer(parse_keys(keys(new_key())))
    sealed = sealer.seal(b"tok-secret", "acme", "github")
    assert b"tok-secret" not in sealed
    assert sealer.open(sealed, "acme", "github") == b"tok-secret"
    for tenant, server in [("other", "github"), ("acme", "gitlab"), ("acm", "egithub")]:
        with pytest.raises(SealBroken):
            sealer.open(sealed, tenant, server)


def test_the_first_key_seals_and_every_key_opens() -> None:
    old, new = new_key(), new_key()
    sealed = Sealer(parse_keys(keys(old))).seal(b"v", "t", "s")
    both = Sealer(parse_keys(keys(new, old)))
    assert both.open(sealed, "t", "s") == b"v" and not both.sealed_under_first(sealed)
    assert both.sealed_under_first(both.seal(b"v", "t", "s"))
    with pytest.raises(SealBroken):
        Sealer(parse_keys(keys(new))).open(sealed, "t", "s")


def test_an_altered_value_does_not_open() -> None:
    sealer = Sealer(parse_keys(keys(new_key())))
    sealed = bytearray(sealer.seal(b"value", "t", "s"))
    sealed[-1] ^= 1
    with pytest.raises(SealBroken):
        sealer.open(bytes(sealed), "t", "s")


@pytest.mark.parametrize(
    "value",
    ["not json", "[]", '{"a": 1}', json.dumps([base64.b64encode(b"short").decode()]), '["!!not-base64!!"]', "[1]"],
)
def test_a_bad_keys_setting_is_refused_without_showing_it(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_keys(SecretStr(value))
    assert "MCP_BATCH_SECRETS_KEYS" in str(raised.value)
    assert "short" not in str(raised.value) and "!!not-base64!!" not in str(raised.value)
