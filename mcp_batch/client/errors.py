"""The client's exceptions: one per kind of answer a caller handles differently.

    ClientError                   anything the client raises on purpose; `str()` is a sentence for a person
     ├── Unreachable              no connection to the service, or it broke mid-answer (`lost`)
     └── ServiceError             the service answered with an error status (`status_code`, `detail`, `problems`)
          ├── InvalidRequest      400, 422: the request is malformed; `problems` lists every fault, nothing stored
          ├── Unauthorized        401: no API key, or not a valid one
          ├── Forbidden           403: the key may not do this; `problems` names each call or field
          ├── NotFound            404: no such batch (or it expired), no such item, or no such route
          ├── Conflict            409: not as things stand (the batch has ended, an Idempotency-Key clash...)
          ├── PayloadTooLarge     413: the body is over the service's limit
          ├── RateLimited         429: too many unfinished items; `retry_after` seconds
          └── Unavailable         503: storage is down for now; `retry_after` when the service said

Messages name places and statuses, never a submitted value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One fault the service (or the client's own check) found: where, like pydantic's `loc`, and what."""

    loc: tuple[str | int, ...]
    msg: str
    type: str = "value_error"

    def describe(self) -> str:
        """`call 3, field 'server': msg`, `line 4, field 'tool': msg`, `field 'mode': msg`, or just `msg`."""
        parts = list(self.loc[1:] if self.loc and self.loc[0] == "body" else self.loc)
        where = []
        if len(parts) >= 2 and parts[0] in ("calls", "line") and isinstance(parts[1], int):
            where.append(f"{'call' if parts[0] == 'calls' else 'line'} {parts[1]}")
            parts = parts[2:]
        if parts:
            where.append("field '" + ".".join(str(p) for p in parts) + "'")
        return f"{', '.join(where)}: {self.msg}" if where else self.msg


class ClientError(Exception):
    """Base of the client's errors."""


class Unreachable(ClientError):
    """The service could not be reached (`lost`: the connection broke after it answered)."""

    def __init__(self, message: str, url: str, lost: bool = False) -> None:
        super().__init__(message)
        self.url = url
        self.lost = lost


class ServiceError(ClientError):
    """The service answered with an error status."""

    def __init__(
        self,
        message: str,
        status_code: int,
        url: str,
        detail: str | None = None,
        problems: Sequence[Problem] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.url = url
        self.detail = detail
        self.problems = list(problems)
        self.retry_after = retry_after


class InvalidRequest(ServiceError):
    """400 or 422: nothing was stored; `problems` lists each fault."""


class Unauthorized(ServiceError):
    """401."""


class Forbidden(ServiceError):
    """403: `problems` names what the key may not do."""


class NotFound(ServiceError):
    """404: the batch, the item, or the route (an older service) does not exist."""


class Conflict(ServiceError):
    """409: `batch_status` is the batch's status when the service gave it (a cancel of an ended batch)."""

    batch_status: str | None = None


class PayloadTooLarge(ServiceError):
    """413."""


class RateLimited(ServiceError):
    """429: wait `retry_after` seconds."""


class Unavailable(ServiceError):
    """503: the service's storage is down for now."""


_BY_STATUS: dict[int, type[ServiceError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: RateLimited,
    503: Unavailable,
}


def problems_of(detail: Any) -> list[Problem]:
    """The problems of a `{"detail": [{"loc", "msg", "type"}...]}` answer (none when `detail` is a sentence)."""
    if not isinstance(detail, list):
        return []
    found = []
    for entry in detail:
        if isinstance(entry, dict):
            loc = tuple(p for p in entry.get("loc") or () if isinstance(p, str | int))
            found.append(Problem(loc, str(entry.get("msg", "")), str(entry.get("type", "value_error"))))
    return found


def service_error(status_code: int, body: Any, url: str, reason: str, retry_after: float | None = None) -> ServiceError:
    """The exception for an error answer, from its status and JSON body (`body` is None when it was not JSON)."""
    detail = body.get("detail") if isinstance(body, dict) else None
    problems = problems_of(detail)
    sentence = detail if isinstance(detail, str) else None
    if problems:
        message = f"the service answered {status_code}: " + "; ".join(p.describe() for p in problems)
    else:
        message = f"the service answered {status_code}: {sentence or reason}"
    kind = _BY_STATUS.get(status_code, ServiceError)
    error = kind(message, status_code, url, sentence, problems, retry_after)
    if isinstance(error, Conflict) and isinstance(body, dict) and isinstance(body.get("status"), str):
        error.batch_status = body["status"]
    return error
