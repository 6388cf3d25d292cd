"""Every worker's webhook sender: POST each ended batch's summary to its `webhook_url`, signed, retried with backoff.

Each attempt is claimed in Redis first (mcp_batch/store/webhook_queue.py), so however many workers run this loop,
exactly one sends it. The loop wakes on the done channel when a batch ends, else when the next retry is due (at
least every `sweep_seconds`). An attempt is bounded by 10 s in all (name resolution included) and follows no
redirect; a 2xx answer delivers the webhook, anything else is retried after an exponential backoff with jitter,
up to `webhook_max_attempts`. The host is resolved here and the request goes to the address checked: unless
`webhook_allow_private`, a host resolving to a loopback, private, link-local or otherwise non-public address is
refused, and a later answer of its DNS cannot redirect the request. The URL never appears in a log line.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import time
from contextlib import suppress

import httpx
from redis.exceptions import RedisError

from mcp_batch import webhook_urls
from mcp_batch.contract import document
from mcp_batch.contract import webhook_policy as webhooks
from mcp_batch.errors import BatchNotFound
from mcp_batch.keys import WEBHOOK_DUE
from mcp_batch.models import WebhookStatus
from mcp_batch.settings import Settings
from mcp_batch.store import Store
from mcp_batch.store.webhook_queue import Attempt
from worker.context import WorkerState

logger = logging.getLogger(__name__)
_JITTER = random.Random()  # its own state: jitter never moves the random module's global one

_TIMEOUT_SECONDS = 10.0  # one attempt, all of it
_BACKOFF_CAP_SECONDS = 300.0
_PER_PASS = 16  # attempts claimed and sent together


class Refused(Exception):
    """The webhook may not be sent (the message says why, never the URL)."""


def backoff(attempt: int, base: float) -> float:
    """Seconds before the attempt after `attempt`: half of min(cap, base * 2^(attempt-1)), plus up to as much again."""
    ceiling = min(_BACKOFF_CAP_SECONDS, base * 2.0 ** (attempt - 1))
    return ceiling / 2 + _JITTER.uniform(0, ceiling / 2)


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


class Sender:
    """Claims due webhooks and sends them."""

    def __init__(self, settings: Settings, store: Store, http: httpx.AsyncClient) -> None:
        self.settings = settings
        self.store = store
        self.http = http
        self.queue = store.webhooks
        self.secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
        self.policy = webhooks.WebhookPolicy.build(settings.webhook_allow, self.secret)

    async def run_once(self) -> float | None:
        """Send what is due; seconds until the next delivery is due (0: more are due now; None: nothing queued)."""
        due, wait = await self.queue.due(_PER_PASS)
        if not due:
            return wait
        attempts = [attempt for batch_id in due if (attempt := await self.queue.claim(batch_id)) is not None]
        outcomes = await asyncio.gather(*(self.attempt(attempt) for attempt in attempts), return_exceptions=True)
        for attempt, outcome in zip(attempts, outcomes, strict=True):
            if isinstance(outcome, BaseException):  # Redis failed: the claim lapses and the attempt runs again
                logger.warning("webhook of batch %s: %s", attempt.batch_id, type(outcome).__name__)
        return 0.0

    async def attempt(self, attempt: Attempt) -> None:
        """Send one claimed attempt and settle it."""
        settings, secret = self.settings, self.secret
        refusal = self.policy.refusal(attempt.url)  # the configuration may have changed since the batch was submitted
        if refusal is not None or secret is None:
            await self.queue.settle(attempt, WebhookStatus.failed)
            logger.warning("webhook of batch %s given up: %s", attempt.batch_id, refusal or webhooks.NOT_CONFIGURED)
            return
        try:
            async with asyncio.timeout(_TIMEOUT_SECONDS):
                code = await self._post(attempt, secret)
            outcome = f"HTTP {code}"
        except BatchNotFound:
            await self.queue.settle(attempt, WebhookStatus.failed)
            logger.warning("webhook of batch %s given up: the batch expired", attempt.batch_id)
            return
        except Refused as exc:
            code, outcome = None, str(exc)
        except (httpx.HTTPError, httpx.InvalidURL, OSError, TimeoutError, ValueError) as exc:
            code, outcome = None, type(exc).__name__  # only its name: the message may hold the URL
        if code is not None and 200 <= code < 300:
            await self.queue.settle(attempt, WebhookStatus.delivered)
            logger.info("webhook of batch %s delivered (attempt %d)", attempt.batch_id, attempt.number)
        elif attempt.number >= settings.webhook_max_attempts:
            await self.queue.settle(attempt, WebhookStatus.failed)
            logger.warning(
                "webhook of batch %s given up after %d attempts; last: %s", attempt.batch_id, attempt.number, outcome
            )
        else:
            delay = backoff(attempt.number, settings.webhook_backoff_base_seconds)
            await self.queue.settle(attempt, WebhookStatus.pending, delay)
            logger.info(
                "webhook of batch %s attempt %d failed (%s); next in %.1fs",
                attempt.batch_id,
                attempt.number,
                outcome,
                delay,
            )

    async def _post(self, attempt: Attempt, secret: str) -> int:
        """POST the summary to the address the host resolved to (checked); the answer's status code."""
        found, _ = document.page(attempt.batch_id, await self.store.reads.page(attempt.batch_id, limit=0))
        body = webhooks.summary(found)
        target = webhook_urls.parse(attempt.url)
        address = await self._resolve(target)
        url = httpx.URL(attempt.url)
        headers = webhooks.headers(secret, body, attempt.batch_id, int(time.time()))
        headers["Host"] = url.netloc.decode("ascii")
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        request = self.http.build_request(
            "POST", url.copy_with(host=address), content=body, headers=headers, extensions=extensions
        )
        response = await self.http.send(request)
        await response.aclose()
        return response.status_code

    async def _resolve(self, target: webhook_urls.Target) -> str:
        infos = await asyncio.get_running_loop().getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        if not addresses:
            raise Refused("the host has no address")
        if not self.settings.webhook_allow_private and not all(_public(a) for a in addresses):
            raise Refused("the host resolves to a non-public address (MCP_BATCH_WEBHOOK_ALLOW_PRIVATE is off)")
        return addresses[0]


async def deliver_forever(state: WorkerState) -> None:
    """Send due webhooks until cancelled: woken when a batch with a webhook ends (the done channel's WEBHOOK_DUE, not
    every end), or when the next retry is due, or every sweep_seconds."""
    settings, done = state.settings, state.done
    async with httpx.AsyncClient(timeout=_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False) as http:
        sender = Sender(settings, state.store, http)
        with done.watch(WEBHOOK_DUE) as ended:
            while True:
                ended.clear()
                wait: float | None = settings.sweep_seconds
                try:
                    wait = await sender.run_once()
                except (RedisError, OSError) as exc:
                    logger.warning("webhook pass failed: %s", type(exc).__name__)
                except Exception:
                    logger.exception("webhook pass failed")
                timeout = settings.sweep_seconds if wait is None else min(wait, settings.sweep_seconds)
                if timeout > 0:
                    with suppress(TimeoutError):
                        async with asyncio.timeout(timeout):
                            await ended.wait()
