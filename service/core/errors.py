"""The exceptions core code raises; only the HTTP layer turns them into status codes.

MCPBatchError
 ├── ConfigError          the servers file (or an environment variable it names) is wrong: start-up stops
 ├── BatchNotFound        no batch with that id (or it expired)
 │    └── ItemNotFound     the batch has no item with that id
 ├── BatchAlreadyFinished the batch has ended, so it cannot be cancelled
 ├── Backpressure         too many items are queued or running; try again after `retry_after`
 ├── InvalidBatch         the request is malformed as a whole; `problems` lists every fault
 └── BackendError         a backend could not be reached or broke mid-call (worker side)
      └── BackendTimeout  the backend did not answer within the call's timeout
"""

from __future__ import annotations

from dataclasses import dataclass


class MCPBatchError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(MCPBatchError):
    """The configuration is unusable; the message names the server and the field."""


class BatchNotFound(MCPBatchError):
    """No batch with this id exists (never created, or past its retention)."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"batch {batch_id!r} not found")
        self.batch_id = batch_id


class ItemNotFound(BatchNotFound):
    """The batch exists but has no item with this id."""

    def __init__(self, batch_id: str, item_id: str) -> None:
        MCPBatchError.__init__(self, f"batch {batch_id!r} has no item {item_id!r}")
        self.batch_id = batch_id
        self.item_id = item_id


class BatchAlreadyFinished(MCPBatchError):
    """The batch has ended (`status` says how); cancelling it changes nothing."""

    def __init__(self, batch_id: str, status: str) -> None:
        super().__init__(f"batch {batch_id!r} has already ended: it is {status}")
        self.batch_id = batch_id
        self.status = status


class Backpressure(MCPBatchError):
    """Accepting the batch would put more items in the queue than the service takes; nothing was stored."""

    def __init__(self, unfinished: int, limit: int, retry_after: int) -> None:
        super().__init__(
            f"the service has {unfinished} unfinished items and takes at most {limit}; try again in {retry_after}s"
        )
        self.retry_after = retry_after


@dataclass(frozen=True)
class Problem:
    """One fault in a request: where (`loc`, like pydantic's) and what, never the offending value."""

    loc: tuple[str | int, ...]
    msg: str
    type: str = "value_error"


class InvalidBatch(MCPBatchError):
    """The batch is rejected whole; nothing was stored or queued."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc))}: {p.msg}" for p in problems))
        self.problems = problems


class BackendError(MCPBatchError):
    """A backend failed outside the tool's own answer (unreachable, crashed, protocol error)."""

    code = "backend_error"


class BackendTimeout(BackendError):
    """The backend did not answer in time."""

    code = "timeout"


class BackendThrottled(BackendError):
    """The backend answered 429; `retry_after` is its Retry-After in seconds, if it gave one."""

    code = "backend_rate_limited"

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BackendUnauthenticated(BackendError):
    """A streamable-HTTP backend answered 401 or 403: the configured credentials were refused."""

    code = "backend_unauthenticated"
