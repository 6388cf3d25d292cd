"""Opaque cursors into a stored item's content: where the rest of a truncated item starts.

A cursor names a batch, an item (by index) and a position in the item's pageable content (block, character). It is
signed with the service's cursor key (HMAC-SHA256) and bound to the tenant it was issued to, so it can be handed to
a caller and taken back from one: `GET /v1/batches/{id}/items/{item_id}?cursor=`, the MCP door's `get_item`, or a
call's own `cursor` (the call's result is the next page, read from the store without calling the backend:
worker/stored_pages.py). A cursor dies with its batch. It is never echoed back: a refusal only says why
(`InvalidCursor.reason`).

Pure functions and values; the key's secret comes from the settings or from Redis (store/cursor_secret.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_batch.contract.budget import At, pageable
from mcp_batch.errors import InvalidCursor

_VERSION = 1
_TAG = 8  # bytes of the tenant's tag
_MAC = 16  # bytes of the signature
_NUMBERS = struct.Struct(">III")  # index, block, character
_MAX_NUMBER = 2**32 - 1


@dataclass(frozen=True)
class Position:
    """Where a cursor points: an item of a batch, and a block and character of its pageable content."""

    batch_id: str
    index: int
    block: int = 0
    char: int = 0


class CursorKey:
    """Issues and opens cursors with one key."""

    def __init__(self, secret: bytes) -> None:
        # A key of its own, derived from the configured secret (which may serve elsewhere too).
        self._key = hmac.new(secret, b"mcp-batch cursor v1", hashlib.sha256).digest()

    def _tag(self, tenant: str) -> bytes:
        return hmac.new(self._key, b"tenant\0" + tenant.encode(), hashlib.sha256).digest()[:_TAG]

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()[:_MAC]

    def issue(self, tenant: str, position: Position) -> str:
        """The cursor of `position`, for `tenant`."""
        name = position.batch_id.encode()
        numbers = (position.index, position.block, position.char)
        if len(name) > 255 or not all(0 <= n <= _MAX_NUMBER for n in numbers):
            raise ValueError("position out of range for a cursor")
        body = bytes([_VERSION, len(name)]) + name + _NUMBERS.pack(*numbers) + self._tag(tenant)
        return base64.urlsafe_b64encode(body + self._mac(body)).rstrip(b"=").decode()

    def open(self, cursor: str, tenant: str) -> Position:
        """The position a cursor issued to `tenant` points at; InvalidCursor saying why it does not verify."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raise InvalidCursor("the cursor is malformed (not one this service issued)") from None
        if len(raw) < 2 or raw[0] != _VERSION or len(raw) != 2 + raw[1] + _NUMBERS.size + _TAG + _MAC:
            raise InvalidCursor("the cursor is malformed (not one this service issued)")
        body, mac = raw[:-_MAC], raw[-_MAC:]
        if not hmac.compare_digest(mac, self._mac(body)):
            raise InvalidCursor("the cursor's signature does not verify (altered, or issued under another key)")
        if not hmac.compare_digest(body[-_TAG:], self._tag(tenant)):
            raise InvalidCursor("the cursor was issued to another tenant")
        end = 2 + raw[1]
        index, block, char = _NUMBERS.unpack(body[end : end + _NUMBERS.size])
        return Position(body[2:end].decode(), index, block, char)


def cursor_length(batch_id: str) -> int:
    """Characters of every cursor into this batch (the byte budget reserves them before the cursor is made)."""
    size = 2 + len(batch_id.encode()) + _NUMBERS.size + _TAG + _MAC
    return len(base64.urlsafe_b64encode(bytes(size)).rstrip(b"="))


def locate(item: Mapping[str, Any], at: Position) -> At:
    """The cursor's position in the item's pageable content, or InvalidCursor when it is past the end."""
    blocks = pageable(item)
    if at.block < len(blocks) and at.char <= len(str(blocks[at.block].get("text", ""))):
        return at.block, at.char
    if (at.block, at.char) == (len(blocks), 0):
        return at.block, at.char
    raise InvalidCursor("the cursor is past the end of the item's content")
