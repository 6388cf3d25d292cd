"""An item whose tenant has not connected an OAuth backend, in a batch that asks (`questions.policy: ask`, the MCP
door's tasks by default): instead of ending `unauthenticated` at once, it asks a URL-mode `elicitation/create` naming
a link that starts the connect (`/v1/oauth/start?ticket=…`, signed for the tenant and server, until the wait ends).
The caller opens it, logs in and consents, then answers `accept`; the call then goes on with the new credential.
Any other answer, or none within the wait, ends it `unauthenticated` as before. No API key travels in the link: the
ticket only starts a flow for the batch's own tenant and server."""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

import orjson
from redis.exceptions import RedisError

from mcp_batch.credentials import flow_state
from mcp_batch.questions import InputKind, QuestionPolicy
from mcp_batch.records import iso
from mcp_batch.store.credentials import Credentials
from worker import questions

logger = logging.getLogger(__name__)


class ConnectWait:
    """Asks the batch's caller to connect, and says whether the tenant did."""

    def __init__(self, credentials: Credentials, public_url: str, key: bytes) -> None:
        self.credentials = credentials
        self.public_url = public_url.rstrip("/")
        self.key = key

    async def connected(self, server: str, tenant: str, connect: str) -> bool:
        """Whether the tenant connected `server` after being asked (False at once when its batch does not ask, or
        the credential is not an OAuth one)."""
        asked = questions.current.get()
        if asked is None or asked.batch.policy is not QuestionPolicy.ask or not connect.endswith("/connect"):
            return False
        batch, index = asked.batch, asked.index
        now, question_id = time.time(), secrets.token_hex(8)
        ticket = flow_state.ticket(self.key, tenant, server, now + batch.wait_seconds)
        link = f"{self.public_url}/v1/oauth/start?ticket={ticket}"
        params: dict[str, Any] = {
            "mode": "url",
            "message": f"Connect {server!r} to run this call: open the link, log in and consent, then accept.",
            "url": link,
            "elicitationId": question_id,
        }
        question: dict[str, Any] = {
            "id": question_id,
            "kind": InputKind.connect.value,
            "method": "elicitation/create",
            "params": params,
        }
        question |= {"asked_at": iso(now), "expires_at": iso(now + batch.wait_seconds)}
        try:
            await batch.store.ask(batch.batch_id, index, orjson.dumps(question), batch.wait_seconds)
            logger.info("item %d: waiting up to %gs for the tenant to connect %s", index, batch.wait_seconds, server)
            raw = await questions.answer_to(batch, index, question_id)
            if raw is None or orjson.loads(raw).get("action") != "accept":
                return False
            held = await self.credentials.get(tenant, server)
        except RedisError as exc:
            logger.warning("item %d: could not ask to connect: %s", index, type(exc).__name__)
            return False
        return held is not None and not held.needs_connect
