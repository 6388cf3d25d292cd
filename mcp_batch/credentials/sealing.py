"""Sealing credentials at rest: AES-256-GCM under the keys of `MCP_BATCH_SECRETS_KEYS`.

The setting is a JSON list of base64 32-byte keys: the first seals, every one opens, so keys rotate (add the new key
first, re-seal, then drop the old). A sealed value is `version | key id | nonce | ciphertext+tag`; the key id (4 bytes
of a hash of the key) picks the key to try. The tenant and server are the associated data, so a value copied under
another tenant's or server's name does not open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr

from mcp_batch.errors import ConfigError, SealBroken

_VERSION = b"\x01"
_ID_BYTES = 4
_NONCE_BYTES = 12
_KEY_BYTES = 32
_CONTEXT = b"mcp-batch credential\n"


def new_key() -> str:
    """A fresh key for MCP_BATCH_SECRETS_KEYS (base64)."""
    return base64.b64encode(os.urandom(_KEY_BYTES)).decode()


def parse_keys(value: SecretStr) -> list[bytes]:
    """The keys of MCP_BATCH_SECRETS_KEYS, or a ConfigError that never shows them."""
    try:
        entries = json.loads(value.get_secret_value())
    except json.JSONDecodeError:
        raise ConfigError("MCP_BATCH_SECRETS_KEYS is not a JSON list of base64 keys") from None
    if not isinstance(entries, list) or not entries:
        raise ConfigError("MCP_BATCH_SECRETS_KEYS must be a non-empty JSON list of base64 keys")
    keys = []
    for n, entry in enumerate(entries):
        try:
            key = base64.b64decode(entry, validate=True) if isinstance(entry, str) else b""
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != _KEY_BYTES:
            raise ConfigError(
                f"MCP_BATCH_SECRETS_KEYS, entry {n}: not a base64 32-byte key (make one with "
                "`mcp-batch credentials new-key`)"
            )
        keys.append(key)
    return keys


def _key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"mcp-batch key id\n" + key).digest()[:_ID_BYTES]


def _associated(tenant: str, server: str) -> bytes:
    # Lengths first, so no two (tenant, server) pairs make one text.
    return _CONTEXT + f"{len(tenant)}:{tenant}{len(server)}:{server}".encode()


class Sealer:
    """Seals and opens values bound to one (tenant, server) under the configured keys."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys:
            raise ConfigError("no secrets key: set MCP_BATCH_SECRETS_KEYS")
        self._keys = [(_key_id(key), AESGCM(key)) for key in keys]

    @classmethod
    def from_setting(cls, value: SecretStr | None) -> Sealer | None:
        """The sealer of MCP_BATCH_SECRETS_KEYS; None when it is unset."""
        return None if value is None else cls(parse_keys(value))

    def seal(self, plaintext: bytes, tenant: str, server: str) -> bytes:
        key_id, aead = self._keys[0]
        nonce = os.urandom(_NONCE_BYTES)
        return _VERSION + key_id + nonce + aead.encrypt(nonce, plaintext, _associated(tenant, server))

    def open(self, sealed: bytes, tenant: str, server: str) -> bytes:
        """The plaintext, or SealBroken (never saying more: the value is nobody's business)."""
        head = 1 + _ID_BYTES
        if len(sealed) < head + _NONCE_BYTES + 16 or sealed[:1] != _VERSION:
            raise SealBroken("a stored credential is not a sealed value")
        key_id, nonce, body = sealed[1:head], sealed[head : head + _NONCE_BYTES], sealed[head + _NONCE_BYTES :]
        data = _associated(tenant, server)
        for _, aead in sorted(self._keys, key=lambda k: k[0] != key_id):
            try:
                return aead.decrypt(nonce, body, data)
            except InvalidTag:
                continue
        raise SealBroken("a stored credential opens under none of MCP_BATCH_SECRETS_KEYS")

    def sealed_under_first(self, sealed: bytes) -> bool:
        """Whether `sealed` names the sealing key (rotation skips those)."""
        return sealed[1 : 1 + _ID_BYTES] == self._keys[0][0]
