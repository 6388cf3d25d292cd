"""`Client`: the HTTP API of mcp-batch from synchronous code (httpx.Client underneath)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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

Progress = Callable[[BatchDocument], object]


Credentials = list[CredentialInfo]
_CREDENTIALS = TypeAdapter(Credentials)


class Client:
    """A client of one mcp-batch service. Use it as a context manager, or `close()` it.

    `max_retries`: how often a 429 or 503 is asked again (after its `Retry-After`, if that is at most
    `max_retry_wait` seconds), and how often a broken results or event stream is resumed.
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = wire.DEFAULT_TIMEOUT,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def batch_url(self, batch_id: str) -> str:
        """The batch document's URL."""
        return f"{self.base_url}/v1/batches/{quote(batch_id, safe='')}"

    def submit(
        self, batch: BatchInput, *, idempotency_key: str | None = None, wait: float = 0, **options: Any
    ) -> BatchDocument:
        """Submit a batch (a BatchRequest, or the calls with options such as `mode="serial"`); the queued document.
        The same `idempotency_key` again answers with the batch the first submit made. With `wait`, the answer is
        held up to that many seconds (at most 60) for the batch's end: then the document with a page of results."""
        body = wire.batch_body(batch, options)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        params, timeout = wire.held(wait, self.timeout)
        # a 503 is asked again only with a key: without one, a batch stored before the failure could be stored twice
        response = self._send(
            "POST",
            "/v1/batches",
            json=body,
            headers=headers,
            params=params,
            timeout=timeout,
            retry_503=idempotency_key is not None,
        )
        return BatchDocument.model_validate_json(response.content)

    def upload(
        self,
        source: bytes | str | os.PathLike[str],
        *,
        idempotency_key: str | None = None,
        wait: float = 0,
        **options: Any,
    ) -> BatchDocument:
        """Submit a JSON Lines batch (one call per line) as it is, streamed: the bytes, or a file's path; the batch
        options as keyword arguments (sent as query parameters; `webhook_url` in a header). `wait` as for submit."""
        content: Callable[[], Any] = (lambda: source) if isinstance(source, bytes) else (lambda: _chunks(source))
        request = wire.upload_request(idempotency_key, wait, self.timeout, options)
        response = self._send("POST", "/v1/batches", content=content, **request)
        return BatchDocument.model_validate_json(response.content)

    def get(self, batch_id: str, *, wait: float = 0, offset: int = 0, limit: int | None = None) -> BatchDocument:
        """The batch document with one page of results; `wait` holds the request up to that many seconds (at most
        60) for the batch to end."""
        params, timeout = wire.held(wait, self.timeout, limit)
        if offset:
            params["offset"] = offset
        response = self._send("GET", wire.batch_path(batch_id), params=params, timeout=timeout)
        return BatchDocument.model_validate_json(response.content)

    def wait(
        self, batch_id: str, timeout: float | None = None, *, progress: Progress | None = None, poll: float = 30
    ) -> BatchDocument:
        """Long-poll until the batch ends or `timeout` seconds pass; the document then (check its `status`).

        `progress` is called with the document (counts, no results) after each poll, at least every `poll` seconds.
        A service that answers early is asked again only a second after the last ask, so this never spins."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            asked = time.monotonic()
            hold = poll if deadline is None else max(0.0, min(poll, deadline - asked))
            document = self.get(batch_id, wait=hold, limit=0)
            if progress is not None:
                progress(document)
            now = time.monotonic()
            if document.status in TERMINAL_BATCH or (deadline is not None and now >= deadline):
                return self.get(batch_id)
            again = asked + 1 if deadline is None else min(asked + 1, deadline)
            time.sleep(max(0.0, again - now))

    def results(
        self, batch_id: str, *, status: Iterable[ItemStatus | str] | None = None, after: int = 0
    ) -> ResultStream:
        """The finished items in finish order, as they stream (iterate it; `.lines()` for the raw JSON Lines);
        resumed after the last item read if the connection breaks. `next_after` is then the cursor for later."""
        return ResultStream(self, batch_id, ",".join(status) if status else None, after)

    def item_page(self, batch_id: str, item_id: str, cursor: str | None = None) -> ItemPage:
        """One page of an item (`next_cursor` leads to the rest of its content)."""
        params = {"cursor": cursor} if cursor else {}
        path = f"{wire.batch_path(batch_id)}/items/{quote(item_id, safe='')}"  # an id may hold '/', '?', '#', '%'
        return ItemPage.model_validate_json(self._send("GET", path, params=params).content)

    def item(self, batch_id: str, item_id: str) -> ItemResult:
        """One item, whole: an item larger than one response comes in pages of its content, joined here."""
        page = self.item_page(batch_id, item_id)
        whole = page.model_dump(exclude={"next_cursor"})
        while page.next_cursor:
            page = self.item_page(batch_id, item_id, page.next_cursor)
            whole["content"] = (whole.get("content") or []) + (page.content or [])
        return ItemResult.model_validate(whole)

    def questions(self, batch_id: str) -> PendingQuestions:
        """The batch's items waiting for an answer to their backend's question (`input_required`)."""
        response = self._send("GET", f"{wire.batch_path(batch_id)}/questions")
        return PendingQuestions.model_validate_json(response.content)

    def answer(
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
        return InputAnswered.model_validate_json((self._send("POST", path, json=body)).content)

    def cancel(self, batch_id: str) -> BatchDocument:
        """Cancel: nothing new starts; Conflict (with `batch_status`) when the batch has already ended, Forbidden
        when the key lacks the `write` right."""
        return BatchDocument.model_validate_json(self._send("POST", f"{wire.batch_path(batch_id)}/cancel").content)

    def retry(self, batch_id: str, *, idempotency_key: str | None = None, **settings: Any) -> BatchDocument:
        """A new batch of a finished batch's items that did not succeed (its `retry_of` names this one), with the
        batch's settings but those given here (`deadline_seconds=None`: none; `timeout_seconds`: every call's)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        path, body = f"{wire.batch_path(batch_id)}/retry", wire.retry_body(settings)
        response = self._send("POST", path, json=body, headers=headers, retry_503=bool(headers))
        return BatchDocument.model_validate_json(response.content)

    def list(
        self,
        *,
        status: Iterable[BatchStatus | str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        metadata: Mapping[str, str] | None = None,
        created_after: wire.Moment | None = None,
        created_before: wire.Moment | None = None,
    ) -> BatchList:
        """A page of the caller's batches, newest first (`next_cursor` for the next page); only those with every
        pair of `metadata`, and created after / before the times given (an aware datetime, epoch seconds or RFC
        3339 text), when given."""
        params = wire.list_params(status or [], limit, cursor, metadata, created_after, created_before)
        return BatchList.model_validate_json(self._send("GET", "/v1/batches", params=params).content)

    def delete(self, batch_id: str) -> None:
        """Delete an ended batch whole (then it is NotFound); Conflict (with `batch_status`) while it has not
        ended: cancel it first; Forbidden when the key lacks the `write` right."""
        self._send("DELETE", wire.batch_path(batch_id))

    def set_credential(self, server: str, secret: str | SecretStr) -> None:
        """Set the tenant's secret for `server` (a backend with `tenant` auth); needs the key's `credentials` right."""
        self._send("PUT", wire.credential_path(server), json=wire.credential_body(secret))

    def credentials(self) -> Credentials:
        """The tenant's credentials for backends: server, kind, when set (and for OAuth, expiry and scopes); never a
        value."""
        response = self._send("GET", "/v1/credentials")
        return _CREDENTIALS.validate_json(response.content)

    def delete_credential(self, server: str) -> None:
        """Delete the tenant's credential for `server` (NotFound when there is none)."""
        self._send("DELETE", wire.credential_path(server))

    def validate(self, batch: BatchInput, **options: Any) -> DryRun:
        """The dry run: every check a submit makes and each call's would-be status; nothing is stored."""
        body = wire.batch_body(batch, options)
        return DryRun.model_validate_json(self._send("POST", "/v1/batches:validate", json=body).content)

    def validate_upload(self, source: bytes | str | os.PathLike[str], **options: Any) -> DryRun:
        """The dry run of a JSON Lines batch (as `upload` takes it)."""
        headers = {"Content-Type": wire.JSON_LINES, **wire.upload_headers(options)}
        content: Callable[[], Any] = (lambda: source) if isinstance(source, bytes) else (lambda: _chunks(source))
        params = wire.upload_params(options)
        response = self._send("POST", "/v1/batches:validate", content=content, headers=headers, params=params)
        return DryRun.model_validate_json(response.content)

    def events(self, batch_id: str, *, after: int = 0) -> Iterator[Event]:
        """The batch's progress as it happens: `item` events (one per finished item, after seq `after`), `progress`,
        then `end`. A stream that breaks or reaches its time limit is resumed after the last item seen."""
        last, failures, answered = after, 0, False
        timeout = httpx.Timeout(self.timeout, read=wire.STREAM_READ_TIMEOUT)
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            path = f"{wire.batch_path(batch_id)}/events"
            try:
                with self._http.stream("GET", path, headers=headers, timeout=timeout) as r:
                    if r.is_error:
                        r.read()
                        raise wire.error_for(r)
                    answered = True
                    decoder = wire.EventDecoder()
                    for line in r.iter_lines():
                        event = decoder.feed(line)
                        if event is None:
                            continue
                        if event.name == "error":
                            raise wire.stream_error(event, str(r.request.url))
                        if event.name == "timeout":
                            break  # the stream's time limit: ask again from where it was
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
                time.sleep(min(0.5 * 2.0**failures, 8.0))

    def _send(self, method: str, path: str, *, retry_503: bool = True, **kwargs: Any) -> httpx.Response:
        """One request, asked again after a 429 (nothing was stored) or, when `retry_503`, a 503."""
        content = kwargs.pop("content", None)
        for attempt in range(self.max_retries + 1):
            if content is not None:
                kwargs["content"] = content()  # a stream can be sent once: make it anew for each attempt
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                raise wire.unreachable(self.base_url, exc) from None
            retryable = response.status_code == 429 or (response.status_code == 503 and retry_503)
            if retryable and attempt < self.max_retries:
                delay = wire.retry_delay(response, attempt)
                if delay <= self.max_retry_wait:
                    time.sleep(delay)
                    continue
            if response.is_error:
                raise wire.error_for(response)
            return response
        raise AssertionError("unreachable")  # the last attempt returns or raises


class ResultStream:
    """`GET /v1/batches/{id}/results` as it streams: iterate for ItemResult, or `lines()` for the raw JSON Lines.

    `next_after` is the cursor for a later read (X-Next-After), set once the stream is done."""

    def __init__(self, client: Client, batch_id: str, status: str | None, after: int) -> None:
        self._client, self._batch_id, self._status = client, batch_id, status
        self.after = after
        self.next_after: int | None = None

    def __iter__(self) -> Iterator[ItemResult]:
        for line in self.lines():
            yield ItemResult.model_validate_json(line)

    def lines(self) -> Iterator[bytes]:
        """Each finished item's JSON line, newline included."""
        client, failures, answered = self._client, 0, False
        while True:
            params: dict[str, Any] = {"after": self.after}
            if self._status:
                params["status"] = self._status
            try:
                with client._http.stream("GET", f"{wire.batch_path(self._batch_id)}/results", params=params) as r:
                    if r.is_error:
                        r.read()
                        raise wire.error_for(r)
                    answered = True
                    cursor = r.headers.get("x-next-after")
                    splitter = wire.LineSplitter()
                    for chunk in r.iter_bytes():
                        for line in splitter.feed(chunk):
                            self.after = wire.seq_of(line) or self.after
                            yield line
                    if splitter.incomplete:  # the service cut the stream short (it lost its storage midway)
                        raise httpx.RemoteProtocolError("the results ended midway")
                    self.next_after = int(cursor) if cursor else self.after
                    return
            except httpx.TransportError as exc:
                failures += 1
                if not answered or failures > client.max_retries:
                    raise wire.unreachable(client.base_url, exc, lost=answered) from None
                time.sleep(min(0.5 * 2.0**failures, 8.0))


def _chunks(path: str | os.PathLike[str], size: int = 1 << 16) -> Iterator[bytes]:
    with Path(path).open("rb") as file:
        while chunk := file.read(size):
            yield chunk
