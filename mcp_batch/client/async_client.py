"""`AsyncClient`: the same API as `Client`, for asyncio code (httpx.AsyncClient underneath)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import SecretStr, TypeAdapter

import mcp_batch.client.wire as wire
from mcp_batch.client.errors import Unavailable
from mcp_batch.client.wire import BatchInput, Event
from mcp_batch.credentials.record import CredentialInfo
from mcp_batch.dry_runs import DryRun
from mcp_batch.models import (
    TERMINAL_BATCH,
    BatchDocument,
    BatchList,
    BatchStatus,
    ItemPage,
    ItemResult,
    ItemStatus,
)
from mcp_batch.questions import InputAnswered, PendingQuestions

AsyncProgress = Callable[[BatchDocument], object | Awaitable[object]]


Credentials = list[CredentialInfo]
_CREDENTIALS = TypeAdapter(Credentials)


class AsyncClient:
    """A client of one mcp-batch service for asyncio. `async with AsyncClient(url) as client: ...`.

    Every method is the coroutine (or async iterator) of `Client`'s method of the same name."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = wire.DEFAULT_TIMEOUT,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, headers=headers, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def batch_url(self, batch_id: str) -> str:
        return f"{self.base_url}/v1/batches/{quote(batch_id, safe='')}"

    async def submit(
        self, batch: BatchInput, *, idempotency_key: str | None = None, wait: float = 0, **options: Any
    ) -> BatchDocument:
        body = wire.batch_body(batch, options)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        params, timeout = wire.held(wait, self.timeout)
        response = await self._send(
            "POST", "/v1/batches", json=body, headers=headers, params=params, timeout=timeout, retry_503=bool(headers)
        )
        return BatchDocument.model_validate_json(response.content)

    async def upload(
        self,
        source: bytes | str | os.PathLike[str],
        *,
        idempotency_key: str | None = None,
        wait: float = 0,
        **options: Any,
    ) -> BatchDocument:
        content: Callable[[], Any] = (lambda: source) if isinstance(source, bytes) else (lambda: _chunks(source))
        request = wire.upload_request(idempotency_key, wait, self.timeout, options)
        response = await self._send("POST", "/v1/batches", content=content, **request)
        return BatchDocument.model_validate_json(response.content)

    async def get(self, batch_id: str, *, wait: float = 0, offset: int = 0, limit: int | None = None) -> BatchDocument:
        params, timeout = wire.held(wait, self.timeout, limit)
        if offset:
            params["offset"] = offset
        response = await self._send("GET", wire.batch_path(batch_id), params=params, timeout=timeout)
        return BatchDocument.model_validate_json(response.content)

    async def wait(
        self, batch_id: str, timeout: float | None = None, *, progress: AsyncProgress | None = None, poll: float = 30
    ) -> BatchDocument:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            asked = time.monotonic()
            hold = poll if deadline is None else max(0.0, min(poll, deadline - asked))
            document = await self.get(batch_id, wait=hold, limit=0)
            if progress is not None:
                shown = progress(document)
                if isinstance(shown, Awaitable):
                    await shown
            now = time.monotonic()
            if document.status in TERMINAL_BATCH or (deadline is not None and now >= deadline):
                return await self.get(batch_id)
            again = asked + 1 if deadline is None else min(asked + 1, deadline)
            await asyncio.sleep(max(0.0, again - now))

    def results(
        self, batch_id: str, *, status: Iterable[ItemStatus | str] | None = None, after: int = 0
    ) -> AsyncResultStream:
        return AsyncResultStream(self, batch_id, ",".join(status) if status else None, after)

    async def item_page(self, batch_id: str, item_id: str, cursor: str | None = None) -> ItemPage:
        params = {"cursor": cursor} if cursor else {}
        path = f"{wire.batch_path(batch_id)}/items/{quote(item_id, safe='')}"
        return ItemPage.model_validate_json((await self._send("GET", path, params=params)).content)

    async def item(self, batch_id: str, item_id: str) -> ItemResult:
        page = await self.item_page(batch_id, item_id)
        whole = page.model_dump(exclude={"next_cursor"})
        while page.next_cursor:
            page = await self.item_page(batch_id, item_id, page.next_cursor)
            whole["content"] = (whole.get("content") or []) + (page.content or [])
        return ItemResult.model_validate(whole)

    async def questions(self, batch_id: str) -> PendingQuestions:
        """The batch's items waiting for an answer to their backend's question (`input_required`)."""
        response = await self._send("GET", f"{wire.batch_path(batch_id)}/questions")
        return PendingQuestions.model_validate_json(response.content)

    async def answer(
        self,
        batch_id: str,
        item_id: str,
        action: str = "accept",
        content: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> InputAnswered:
        """Answer the item's question: `accept` with `content`, `decline` or `cancel`; InvalidRequest naming each
        field that does not fit its schema, Conflict when the item waits for no answer."""
        path, body = wire.answer_request(batch_id, item_id, action, content, request_id)
        return InputAnswered.model_validate_json((await self._send("POST", path, json=body)).content)

    async def cancel(self, batch_id: str) -> BatchDocument:
        response = await self._send("POST", f"{wire.batch_path(batch_id)}/cancel")
        return BatchDocument.model_validate_json(response.content)

    async def retry(self, batch_id: str, *, idempotency_key: str | None = None, **settings: Any) -> BatchDocument:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        path, body = f"{wire.batch_path(batch_id)}/retry", wire.retry_body(settings)
        response = await self._send("POST", path, json=body, headers=headers, retry_503=bool(headers))
        return BatchDocument.model_validate_json(response.content)

    async def list(
        self,
        *,
        status: Iterable[BatchStatus | str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        metadata: Mapping[str, str] | None = None,
        created_after: wire.Moment | None = None,
        created_before: wire.Moment | None = None,
    ) -> BatchList:
        params = wire.list_params(status or [], limit, cursor, metadata, created_after, created_before)
        return BatchList.model_validate_json((await self._send("GET", "/v1/batches", params=params)).content)

    async def delete(self, batch_id: str) -> None:
        await self._send("DELETE", wire.batch_path(batch_id))

    async def set_credential(self, server: str, secret: str | SecretStr) -> None:
        """Set the tenant's secret for `server` (a backend with `tenant` auth); needs the key's `credentials` right."""
        await self._send("PUT", wire.credential_path(server), json=wire.credential_body(secret))

    async def credentials(self) -> Credentials:
        """The tenant's credentials for backends: server, kind, when set (and for OAuth, expiry and scopes); never a
        value."""
        response = await self._send("GET", "/v1/credentials")
        return _CREDENTIALS.validate_json(response.content)

    async def delete_credential(self, server: str) -> None:
        """Delete the tenant's credential for `server` (NotFound when there is none)."""
        await self._send("DELETE", wire.credential_path(server))

    async def validate(self, batch: BatchInput, **options: Any) -> DryRun:
        body = wire.batch_body(batch, options)
        return DryRun.model_validate_json((await self._send("POST", "/v1/batches:validate", json=body)).content)

    async def validate_upload(self, source: bytes | str | os.PathLike[str], **options: Any) -> DryRun:
        headers = {"Content-Type": wire.JSON_LINES, **wire.upload_headers(options)}
        content: Callable[[], Any] = (lambda: source) if isinstance(source, bytes) else (lambda: _chunks(source))
        params = wire.upload_params(options)
        response = await self._send("POST", "/v1/batches:validate", content=content, headers=headers, params=params)
        return DryRun.model_validate_json(response.content)

    async def events(self, batch_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        last, failures, answered = after, 0, False
        timeout = httpx.Timeout(self.timeout, read=wire.STREAM_READ_TIMEOUT)
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            try:
                path = f"{wire.batch_path(batch_id)}/events"
                async with self._http.stream("GET", path, headers=headers, timeout=timeout) as r:
                    if r.is_error:
                        await r.aread()
                        raise wire.error_for(r)
                    answered = True
                    decoder = wire.EventDecoder()
                    async for line in r.aiter_lines():
                        event = decoder.feed(line)
                        if event is None:
                            continue
                        if event.name == "error":
                            raise wire.stream_error(event, str(r.request.url))
                        if event.name == "timeout":
                            break
                        failures = 0
                        last = event.seq or last
                        yield event
                        if event.name == "end":
                            return
            except (httpx.TransportError, Unavailable) as exc:
                failures += 1
                if not answered or failures > self.max_retries:
                    if isinstance(exc, Unavailable):
                        raise
                    raise wire.unreachable(self.base_url, exc, lost=answered) from None
                await asyncio.sleep(min(0.5 * 2.0**failures, 8.0))

    async def _send(self, method: str, path: str, *, retry_503: bool = True, **kwargs: Any) -> httpx.Response:
        content = kwargs.pop("content", None)
        for attempt in range(self.max_retries + 1):
            if content is not None:
                kwargs["content"] = content()
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                raise wire.unreachable(self.base_url, exc) from None
            retryable = response.status_code == 429 or (response.status_code == 503 and retry_503)
            if retryable and attempt < self.max_retries:
                delay = wire.retry_delay(response, attempt)
                if delay <= self.max_retry_wait:
                    await asyncio.sleep(delay)
                    continue
            if response.is_error:
                raise wire.error_for(response)
            return response
        raise AssertionError("unreachable")


class AsyncResultStream:
    """`async for item in stream`, or `stream.lines()` for the raw JSON Lines; `next_after` once done."""

    def __init__(self, client: AsyncClient, batch_id: str, status: str | None, after: int) -> None:
        self._client, self._batch_id, self._status = client, batch_id, status
        self.after = after
        self.next_after: int | None = None

    async def __aiter__(self) -> AsyncIterator[ItemResult]:
        async for line in self.lines():
            yield ItemResult.model_validate_json(line)

    async def lines(self) -> AsyncIterator[bytes]:
        client, failures, answered = self._client, 0, False
        while True:
            params: dict[str, Any] = {"after": self.after}
            if self._status:
                params["status"] = self._status
            try:
                path = f"{wire.batch_path(self._batch_id)}/results"
                async with client._http.stream("GET", path, params=params) as r:
                    if r.is_error:
                        await r.aread()
                        raise wire.error_for(r)
                    answered = True
                    cursor = r.headers.get("x-next-after")
                    splitter = wire.LineSplitter()
                    async for chunk in r.aiter_bytes():
                        for line in splitter.feed(chunk):
                            self.after = wire.seq_of(line) or self.after
                            yield line
                    if splitter.incomplete:
                        raise httpx.RemoteProtocolError("the results ended midway")
                    self.next_after = int(cursor) if cursor else self.after
                    return
            except httpx.TransportError as exc:
                failures += 1
                if not answered or failures > client.max_retries:
                    raise wire.unreachable(client.base_url, exc, lost=answered) from None
                await asyncio.sleep(min(0.5 * 2.0**failures, 8.0))


async def _chunks(path: str | os.PathLike[str], size: int = 1 << 16) -> AsyncIterator[bytes]:
    file = await asyncio.to_thread(Path(path).open, "rb")
    try:
        while chunk := await asyncio.to_thread(file.read, size):
            yield chunk
    finally:
        file.close()
