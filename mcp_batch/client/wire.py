"""What the sync and async clients share, without I/O: the request bodies, error answers turned into exceptions,
`Retry-After`, and the framing of the two streams (JSON Lines results, Server-Sent Events)."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import SecretStr, ValidationError

from mcp_batch.client.errors import (
    InvalidRequest,
    NotFound,
    Problem,
    ServiceError,
    Unavailable,
    Unreachable,
    service_error,
)
from mcp_batch.metadata import QUERY_PREFIX
from mcp_batch.models import BatchRequest, Call
from mcp_batch.questions import InputAnswer
from mcp_batch.retry_request import RetryRequest
from mcp_batch.webhook_urls import URL_HEADER as WEBHOOK_URL_HEADER

DEFAULT_TIMEOUT = 30.0
MAX_WAIT = 60.0  # the API's bound on ?wait=
STREAM_READ_TIMEOUT = 120.0  # an event stream sends a keep-alive every 15 s by default: silence this long is a break

BatchInput = BatchRequest | Sequence[Call | Mapping[str, Any]]
"""What `submit` and `validate` take: a whole BatchRequest, or the calls alone (options as keyword arguments)."""

JSON_LINES = "application/x-ndjson"


def held(wait: float, timeout: float, limit: int | None = None) -> tuple[dict[str, Any], httpx.Timeout]:
    """The query of a request held up to `wait` seconds for its batch's end (`?wait`, `?limit`), and a timeout whose
    read outlasts the hold."""
    params: dict[str, Any] = {"wait": round(min(wait, MAX_WAIT), 3)} if wait else {}
    if limit is not None:
        params["limit"] = limit
    return params, httpx.Timeout(timeout, read=wait + timeout)


def batch_body(batch: BatchInput, options: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of a submit or dry run, checked here first (InvalidRequest, as the service would answer 422).

    Only the fields given are sent, so the service's defaults apply to the rest."""
    fields: dict[str, Any] = (
        batch.model_dump(mode="json", exclude_unset=True)
        if isinstance(batch, BatchRequest)
        else {"calls": [c.model_dump(mode="json", exclude_unset=True) if isinstance(c, Call) else c for c in batch]}
    )
    fields.update({name: value for name, value in options.items() if value is not None})
    try:
        BatchRequest.model_validate(fields)
    except ValidationError as exc:
        # include_input=False: pydantic would otherwise carry the submitted value along with each error
        errors = exc.errors(include_input=False, include_url=False)
        problems = [Problem(tuple(e["loc"]), e["msg"], e["type"]) for e in errors]
        message = "not a valid batch: " + "; ".join(p.describe() for p in problems)
        raise InvalidRequest(message, 422, "", None, problems) from None
    return fields


def retry_body(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The body of a retry: the settings given (None included: a submit's default), checked here first; None when
    none is given (every setting kept)."""
    if not settings:
        return None
    try:
        RetryRequest.model_validate(settings)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        problems = [Problem(tuple(e["loc"]), e["msg"], e["type"]) for e in errors]
        message = "not a valid retry: " + "; ".join(p.describe() for p in problems)
        raise InvalidRequest(message, 422, "", None, problems) from None
    return dict(settings)


def upload_params(options: Mapping[str, Any]) -> dict[str, str]:
    """A JSON Lines upload's batch options as query parameters (booleans as `true`/`false`), but `webhook_url`,
    which may carry a secret and goes in a header (`upload_headers`)."""
    params = {}
    for name, value in options.items():
        if name == "metadata" and value:  # each pair a parameter of its own: `metadata.<key>=<value>`
            params.update({QUERY_PREFIX + key: str(pair) for key, pair in value.items()})
        elif value is not None and name not in ("webhook_url", "metadata"):
            params[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return params


Moment = datetime | float | int | str
"""A time a listing filters on: an aware datetime, seconds since the epoch, or RFC 3339 text."""


def list_params(
    status: Iterable[str],
    limit: int,
    cursor: str | None,
    metadata: Mapping[str, str] | None = None,
    created_after: Moment | None = None,
    created_before: Moment | None = None,
) -> dict[str, Any]:
    """The query of `GET /v1/batches`: its page, and its filters (every metadata pair must match)."""
    params: dict[str, Any] = {"limit": limit, "status": list(status)}
    if cursor:
        params["cursor"] = cursor
    params.update({QUERY_PREFIX + key: value for key, value in (metadata or {}).items()})
    for name, moment in (("created_after", created_after), ("created_before", created_before)):
        if moment is not None:
            params[name] = moment.isoformat() if isinstance(moment, datetime) else str(moment)
    return params


def upload_request(
    idempotency_key: str | None, wait: float, timeout: float, options: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of a JSON Lines upload's POST but its body: the options as query parameters (and
    headers), the key, the hold for the batch's end; a 503 is asked again only with a key."""
    headers = {"Content-Type": JSON_LINES, **upload_headers(options)}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    held_params, held_timeout = held(wait, timeout)
    params = {**upload_params(options), **held_params}
    return {"headers": headers, "params": params, "timeout": held_timeout, "retry_503": bool(idempotency_key)}


def upload_headers(options: Mapping[str, Any]) -> dict[str, str]:
    """The headers of a JSON Lines upload's options: its `webhook_url`, never put in a URL (URLs are logged)."""
    url = options.get("webhook_url")
    return {} if url is None else {WEBHOOK_URL_HEADER: str(url)}


def retry_delay(response: httpx.Response, attempt: int) -> float:
    """How long to wait before asking again after a 429 or 503: its Retry-After (seconds or an HTTP date), else a
    short doubling backoff."""
    value = response.headers.get("retry-after", "").strip()
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when: float = email.utils.parsedate_to_datetime(value).timestamp()
            return max(0.0, when - time.time())
        except (TypeError, ValueError):
            pass
    return min(0.5 * 2.0**attempt, 8.0)


def error_for(response: httpx.Response) -> ServiceError:
    """The exception for an error answer (its body already read)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    retry_after = None
    if response.status_code in (429, 503) and response.headers.get("retry-after"):
        retry_after = retry_delay(response, 0)
    return service_error(response.status_code, body, str(response.request.url), response.reason_phrase, retry_after)


def unreachable(base_url: str, exc: httpx.TransportError, lost: bool = False) -> Unreachable:
    what = "lost the connection to" if lost else "could not reach"
    reason = str(exc) or type(exc).__name__
    return Unreachable(f"{what} the mcp-batch server at {base_url} ({reason})", base_url, lost)


def credential_path(server: str) -> str:
    return f"/v1/credentials/{quote(server, safe='')}"


def credential_body(secret: str | SecretStr) -> dict[str, str]:
    """The body of a PUT of a secret: the one place the client reads its value."""
    return {"secret": secret.get_secret_value() if isinstance(secret, SecretStr) else secret}


def batch_path(batch_id: str) -> str:
    return f"/v1/batches/{quote(batch_id, safe='')}"


def answer_request(
    batch_id: str, item_id: str, action: str, content: Mapping[str, Any] | None, request_id: str | None
) -> tuple[str, dict[str, Any]]:
    """The path and body of an answer to an item's question (checked here first, as the service would)."""
    fields = {"action": action, "content": None if content is None else dict(content), "request_id": request_id}
    try:
        body = InputAnswer.model_validate(fields)
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False)
        problems = [Problem(tuple(e["loc"]), e["msg"], e["type"]) for e in errors]
        raise InvalidRequest(
            "not a valid answer: " + "; ".join(p.describe() for p in problems), 422, "", None, problems
        ) from None
    path = f"{batch_path(batch_id)}/items/{quote(item_id, safe='')}/input"
    return path, body.model_dump(mode="json", exclude_none=True)


def stream_error(event: Event, url: str) -> ServiceError:
    """The exception for an `error` event: the batch went away, or the service lost its storage."""
    detail = str(event.data.get("detail", "the event stream failed"))
    if "not found" in detail:
        return NotFound(f"the event stream stopped: {detail}", 404, url, detail)
    return Unavailable(f"the event stream stopped: {detail}", 503, url, detail)


def seq_of(line: bytes) -> int | None:
    """The `seq` of one results line."""
    try:
        seq = json.loads(line).get("seq")
    except (ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


class LineSplitter:
    """Bytes as they arrive, cut into whole lines (each with its newline); a line cut short is kept for the next."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._rest + chunk
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        return data[:cut].splitlines(keepends=True) if cut else []

    @property
    def incomplete(self) -> bool:
        """A line started and not ended: the stream stopped midway."""
        return bool(self._rest)


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of `GET /v1/batches/{id}/events`: `item` (with `id`, its seq), `progress` or `end`;
    `data` is its JSON."""

    name: str
    data: dict[str, Any]
    id: str | None = None

    @property
    def seq(self) -> int | None:
        """The item's place in finish order (item events)."""
        return int(self.id) if self.id is not None and self.id.isdigit() else None


class EventDecoder:
    """The text/event-stream format, line by line: fields up to a blank line make an event; comments are dropped."""

    def __init__(self) -> None:
        self._name = "message"
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> Event | None:
        if not line:
            if not self._data:
                self._name = "message"
                return None
            event = Event(self._name, _json_object("\n".join(self._data)), self._id)
            self._name, self._data, self._id = "message", [], None
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._name = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            self._id = value
        return None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"text": text}
    return value if isinstance(value, dict) else {"value": value}
