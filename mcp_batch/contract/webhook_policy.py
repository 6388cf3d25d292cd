"""Completion webhooks, the pure part: which URLs may be called, the body sent, and its signature.

A batch's `webhook_url` must fall under an entry of `MCP_BATCH_WEBHOOK_ALLOW`, a URL prefix (both parsed by
mcp_batch/webhook_urls.py): scheme, host and port compared exactly, then the entry's path a prefix of the URL's,
ending on a segment boundary. Plain `http://` passes only under an entry that says `http://`. Messages never repeat
the URL: it may carry a token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass

from mcp_batch.models import BatchDocument
from mcp_batch.webhook_urls import Target, allow_entry, parse

SIGNATURE_HEADER = "X-MCP-Batch-Signature"
TIMESTAMP_HEADER = "X-MCP-Batch-Timestamp"
ID_HEADER = "X-MCP-Batch-Id"
MAX_FAILED_IDS = 1_000  # failed ids in a webhook's body; `counts.failed` has the number
NOT_CONFIGURED = "webhooks are not configured"


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
        "metadata": document.metadata,
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
