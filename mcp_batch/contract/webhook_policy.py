"""Completion webhooks, the pure part: which URLs may be called, the body sent, and its signature.

A batch's `webhook_url` must fall under an entry of `MCP_BATCH_WEBHOOK_ALLOW`, a URL prefix: scheme, host and port
are compared exactly once both are parsed (so neither `https://hooks.example.com.evil.io/` nor
`https://hooks.example.com@evil/` falls under `https://hooks.example.com/`), then the entry's path must be a prefix
of the URL's, ending on a segment boundary. Plain `http://` passes only under an entry that says `http://`. A URL
with credentials (`user@`), a dot segment, a backslash, whitespace, a control or a non-ASCII character is refused
whatever the list says. Messages never repeat the URL: it may carry a token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from mcp_batch.models import BatchDocument

SIGNATURE_HEADER = "X-MCP-Batch-Signature"
TIMESTAMP_HEADER = "X-MCP-Batch-Timestamp"
ID_HEADER = "X-MCP-Batch-Id"
URL_HEADER = "X-MCP-Batch-Webhook-URL"  # a JSON Lines upload's webhook_url: never in a query string, which is logged
MAX_URL_LENGTH = 2_000
MAX_FAILED_IDS = 1_000  # failed ids in a webhook's body; `counts.failed` has the number
NOT_CONFIGURED = "webhooks are not configured"
_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Target:
    """A parsed webhook URL, or an allow-list entry: what is compared."""

    scheme: str
    host: str
    port: int
    path: str

    def covers(self, url: Target) -> bool:
        """This allow-list entry admits `url`: same scheme, host and port; its path under this one's."""
        if (self.scheme, self.host, self.port) != (url.scheme, url.host, url.port):
            return False
        if self.path.endswith("/"):
            return url.path.startswith(self.path)
        return url.path == self.path or url.path.startswith(self.path + "/")


def _split(url: str) -> tuple[Target, SplitResult]:
    """Parse an absolute http(s) URL; ValueError's message says what is wrong without repeating it."""
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"at most {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(c <= " " or c in "\x7f\\" for c in url):
        raise ValueError("must be ASCII without whitespace, control characters or backslashes (percent-encode them)")
    parts = urlsplit(url)
    if parts.scheme not in _PORTS:
        raise ValueError("must be an https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials (user@host)")
    if not parts.hostname:
        raise ValueError("must name a host")
    if {".", ".."} & set(unquote(parts.path).split("/")):
        raise ValueError("must not contain dot segments (/./ or /../)")
    return Target(parts.scheme, parts.hostname, port or _PORTS[parts.scheme], parts.path or "/"), parts


def parse(url: str) -> Target:
    """A webhook URL, parsed (ValueError says why it cannot be used)."""
    return _split(url)[0]


def allow_entry(entry: str) -> Target:
    """An allow-list entry, parsed; ValueError (naming the entry: it is configuration, not a caller's URL)."""
    try:
        target, parts = _split(entry)
    except ValueError as exc:
        raise ValueError(f"webhook_allow entry {entry!r}: {exc}") from None
    if parts.query or parts.fragment:
        raise ValueError(f"webhook_allow entry {entry!r}: a prefix has no query or fragment")
    return target


@dataclass(frozen=True)
class WebhookPolicy:
    """Where webhooks may go, and whether they can be signed at all."""

    allow: tuple[Target, ...]
    configured: bool  # a signing secret is set

    @classmethod
    def build(cls, allow: Sequence[str], secret: str | None) -> WebhookPolicy:
        return cls(tuple(allow_entry(entry) for entry in allow), bool(secret))

    def refusal(self, url: str) -> str | None:
        """Why `url` may not be called (a message that does not repeat it), or None when it may."""
        if not self.configured or not self.allow:
            return NOT_CONFIGURED
        try:
            target = parse(url)
        except ValueError as exc:
            return str(exc)
        if target.scheme == "http" and not any(entry.scheme == "http" for entry in self.allow):
            return "must be an https:// URL"
        if not any(entry.covers(target) for entry in self.allow):
            return "not an allowed webhook destination (see MCP_BATCH_WEBHOOK_ALLOW)"
        return None


def summary(document: BatchDocument) -> bytes:
    """The webhook's body: the final document without its results, compact JSON."""
    body = {
        "id": document.id,
        "status": document.status.value,
        "ok": document.ok,
        "counts": document.counts.model_dump(mode="json"),
        "failed_ids": document.failed_ids[:MAX_FAILED_IDS],
        "created_at": document.created_at,
        "finished_at": document.finished_at,
        "retry_of": document.retry_of,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: `sha256=` and the hex HMAC-SHA256 of the exact body bytes."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def headers(secret: str, body: bytes, batch_id: str, timestamp: int) -> dict[str, str]:
    """The headers of one delivery."""
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(secret, body),
        TIMESTAMP_HEADER: str(timestamp),
        ID_HEADER: batch_id,
    }
