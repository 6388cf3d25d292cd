"""The HTTP client behind the CLI's client commands: check a batch file, submit it, read and long-poll the
document, stream the results. Synchronous (httpx.Client); imports nothing from FastAPI.

Errors carry the message for the user and the exit code:

    RemoteError          a client command failed                         exit 1
      ├─ BadBatch        the file or the batch is wrong, found here or
      │                  by the server's 422; nothing was stored         exit 2
      ├─ Unreachable     no connection to the server (or it was lost)    exit 1
      └─ ServerError     the server answered with another error (404…)   exit 1
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from pydantic import ValidationError

from mcp_batch.contract.validation import validate_batch
from mcp_batch.errors import InvalidBatch
from mcp_batch.models import TERMINAL_BATCH, BatchRequest, BatchStatus

DEFAULT_SERVER_URL = "http://127.0.0.1:8000"


class RemoteError(Exception):
    """A client command failed; `str()` is the message for the user."""

    exit_code = 1


class BadBatch(RemoteError):
    """The batch file cannot be sent as it is, or the server rejected the batch."""

    exit_code = 2

    def __init__(self, heading: str, problems: Sequence[str] = ()) -> None:
        super().__init__("\n  ".join([heading, *problems]))


class Unreachable(RemoteError):
    """The server could not be reached, or the connection broke."""


class ServerError(RemoteError):
    """The server answered with an error status other than 422."""


def describe(loc: Sequence[str | int], msg: str) -> str:
    """One problem as `call 3, field 'server': msg` or `field 'mode': msg`; `loc` as pydantic gives it."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)  # the server's locations start at the body
    where = []
    if len(parts) >= 2 and parts[0] == "calls" and isinstance(parts[1], int):
        where.append(f"call {parts[1]}")
        parts = parts[2:]
    if parts:
        where.append("field '" + ".".join(str(p) for p in parts) + "'")
    return f"{', '.join(where)}: {msg}" if where else msg


def load_batch(source: str, stdin: IO[bytes] | None = None) -> dict[str, Any]:
    """Read and check a batch file (`-`: stdin) before anything is sent; raise BadBatch saying what is wrong.

    Messages name places (line and column, call and field), never values: arguments may hold secrets.
    """
    name = "stdin" if source == "-" else source
    try:
        data = (stdin or sys.stdin.buffer).read() if source == "-" else Path(source).read_bytes()
    except FileNotFoundError:
        raise BadBatch(f"{name}: no such file") from None
    except OSError as exc:
        raise BadBatch(f"{name}: cannot be read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, column = _position(data[: exc.start].decode("utf-8", "replace"))
        raise BadBatch(f"{name}: not UTF-8 text (line {line}, column {column})") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadBatch(f"{name}: not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(body, dict):
        kind = _JSON_KINDS.get(type(body), "something else")
        raise BadBatch(f"{name}: holds no batch: expected a JSON object with `calls`, found {kind}")
    heading = f"{name}: not a valid batch, nothing was sent:"
    try:
        request = BatchRequest.model_validate(body)
    except ValidationError as exc:
        # include_input=False: pydantic would otherwise carry the submitted value along with each error
        errors = exc.errors(include_input=False, include_url=False)
        raise BadBatch(heading, [describe(e["loc"], e["msg"]) for e in errors]) from None
    try:
        # Only the server knows its limits (most calls, highest max_concurrency); it checks those itself.
        unlimited = sys.maxsize
        validate_batch(request, unlimited, unlimited, default_concurrency=1, response_ceiling=unlimited)
    except InvalidBatch as exc:
        raise BadBatch(heading, [describe(p.loc, p.msg) for p in exc.problems]) from None
    return body


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_JSON_KINDS[type(None)] = "null"


def _position(before: str) -> tuple[int, int]:
    lines = before.split("\n")
    return len(lines), len(lines[-1]) + 1


@dataclass
class Results:
    """An open `GET /v1/batches/{id}/results` response: the JSON Lines as they arrive, and the next cursor."""

    next_after: int | None
    chunks: Iterator[bytes]


class Remote:
    """A client of one mcp-batch server. Use as a context manager."""

    def __init__(self, base_url: str, timeout: float = 30, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def url(self, batch_id: str) -> str:
        """The batch document's URL."""
        return f"{self.base_url}/v1/batches/{batch_id}"

    def submit(self, batch: dict[str, Any]) -> dict[str, Any]:
        """POST the batch; the queued document. A 422 becomes BadBatch listing every problem."""
        return _json(self._request("POST", "/v1/batches", None, json=batch))

    def document(self, batch_id: str, wait: float = 0, limit: int | None = None) -> dict[str, Any]:
        """The batch document; `wait` holds the request up to that many seconds (at most 60) for the end."""
        params: dict[str, Any] = {"wait": wait} if wait else {}
        if limit is not None:
            params["limit"] = limit
        # the read timeout must outlast the long poll, or every wait that runs its course would fail
        timeout = httpx.Timeout(self._timeout, read=wait + self._timeout)
        return _json(self._request("GET", f"/v1/batches/{batch_id}", batch_id, params=params, timeout=timeout))

    def wait(
        self, batch_id: str, seconds: float, poll: float = 60, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Long-poll the document, yielding it after each poll, until the batch ends or `seconds` pass.

        Each poll is held by the server up to `poll` seconds and answered at once when the batch ends; a server
        that answers early anyway is asked again only a second after the last ask, so this never spins.
        """
        deadline = time.monotonic() + seconds
        while True:
            asked = time.monotonic()
            wait = min(deadline - asked, poll, 60)
            document = self.document(batch_id, wait=round(max(wait, 0.0), 3), limit=limit)
            yield document
            now = time.monotonic()
            if BatchStatus(document["status"]) in TERMINAL_BATCH or now >= deadline:
                return
            time.sleep(max(0.0, min(asked + 1, deadline) - now))

    @contextmanager
    def results(self, batch_id: str, status: str | None = None, after: int | None = None) -> Iterator[Results]:
        """Stream the finished items as JSON Lines, in finish order (never loaded whole)."""
        params: dict[str, Any] = {}
        if status:
            params["status"] = status
        if after is not None:
            params["after"] = after
        path = f"/v1/batches/{batch_id}/results"
        try:
            with self._http.stream("GET", path, params=params) as response:
                if response.is_error:
                    response.read()
                    _check(response, batch_id)
                cursor = response.headers.get("x-next-after")
                yield Results(int(cursor) if cursor else None, self._guard(response.iter_bytes()))
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _guard(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        except httpx.TransportError as exc:
            raise self._unreachable(exc, lost=True) from None

    def _request(self, method: str, path: str, batch_id: str | None, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        _check(response, batch_id)
        return response

    def _unreachable(self, exc: httpx.TransportError, lost: bool = False) -> Unreachable:
        what = "lost the connection to" if lost else "could not reach"
        reason = str(exc) or type(exc).__name__
        return Unreachable(f"{what} the mcp-batch server at {self.base_url} ({reason})")


def _check(response: httpx.Response, batch_id: str | None = None) -> None:
    if not response.is_error:
        return
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if response.status_code == 422 and isinstance(detail, list):
        problems = [describe(d.get("loc", []), str(d.get("msg", ""))) for d in detail if isinstance(d, dict)]
        raise BadBatch("the server rejected the batch, nothing was stored:", problems)
    if response.status_code == 404 and detail == "Not Found":  # the route, not the batch (an older server)
        raise ServerError(f"{response.request.url} does not exist on this server (is it an older mcp-batch?)")
    if response.status_code == 404 and batch_id is not None:
        raise ServerError(
            f"no batch {batch_id!r} at {response.request.url.scheme}://{response.request.url.netloc.decode()}"
            " (unknown, or expired)"
        )
    raise ServerError(f"the server answered {response.status_code}: {detail or response.reason_phrase}")


def _json(response: httpx.Response) -> dict[str, Any]:
    document: dict[str, Any] = response.json()
    return document


class Progress:
    """The live progress line of a batch on a stream (stderr): rewritten in place with `\\r` on a terminal, a new
    line every `every` seconds otherwise (a log file gets a readable history, not a wall of carriage returns)."""

    def __init__(self, stream: IO[str], every: float = 5.0) -> None:
        self._stream = stream
        self.tty = stream.isatty()
        self.poll = 1.0 if self.tty else every  # how long each long poll may be held: one update per poll
        self._width = 0

    def update(self, document: dict[str, Any]) -> None:
        """Show the document's progress."""
        line = progress_line(document)
        if self.tty:
            self._stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        """End the line in place, so what follows starts on a line of its own."""
        if self.tty and self._width:
            self._stream.write("\n")
            self._stream.flush()


def progress_line(document: dict[str, Any]) -> str:
    """`12/40 done, 1 failed, 8.3 calls/s, 1.4s elapsed` for a batch document."""
    counts = document["counts"]
    done = counts["total"] - counts["pending"] - counts["running"]
    elapsed = float(document["elapsed_seconds"])
    rate = done / elapsed if elapsed > 0 else 0.0
    return f"{done}/{counts['total']} done, {counts['failed']} failed, {rate:.1f} calls/s, {elapsed:.1f}s elapsed"
