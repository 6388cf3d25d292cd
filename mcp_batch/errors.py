"""The exceptions core code raises; only the HTTP layer turns them into status codes.

MCPBatchError
 ├── ConfigError                  the servers file (or an environment variable it names) is wrong: start-up stops
 ├── BatchNotFound                no batch with that id (or it expired)
 │    └── ItemNotFound            the batch has no item with that id
 ├── CredentialNotFound           the tenant holds no credential for that server
 │    └── ServerNotFound          no such server for the caller's key (connecting it)
 ├── SealBroken                   a stored credential opens under none of the secrets keys
 ├── Backpressure                 too many items are queued or running; try again after `retry_after`
 │    ├── TenantBackpressure      the tenant's own unfinished items are at its key's ceiling
 │    └── StoredBytesCeiling      the tenant's stored batches would pass its ceiling of bytes
 ├── InvalidBatch                 the request is malformed as a whole; `problems` lists every fault
 │    └── InvalidCursor           a cursor does not verify or does not fit what it is used for (`reason` says why)
 ├── HostNotAllowed               the request's Host names no host the service serves under (DNS rebinding)
 ├── Unauthenticated              no valid API key was presented
 ├── Forbidden                    the key may not do this (a server, write tools, another tenant's team)
 ├── Conflict                     the request cannot be carried out as things stand
 │    ├── IdempotencyConflict     the Idempotency-Key was first used with a different request
 │    ├── IdempotencyInProgress   the first request with that key is still storing its batch
 │    ├── BatchAlreadyFinished    the batch has ended, so it cannot be cancelled
 │    ├── BatchNotEnded           the batch has not ended, so it cannot be deleted (cancel it first)
 │    ├── CredentialNotAccepted   the server takes no secret from the tenant (the message says what it takes)
 │    └── NotRetryable            the batch cannot be retried (the message says why)
 │         ├── BatchNotFinished   it has not finished yet
 │         └── NothingToRetry     every item succeeded
 ├── ReplicaWaitFailed            a write's claim did not reach the replicas asked for in time (worker side): the call
 │                                is not sent
 ├── OAuthUnavailable             an OAuth backend's authorization server could not be found or used
 ├── OAuthGrantRefused            the authorization server refused a code or refresh token: connect again
 └── BackendError                 a backend could not be reached or broke mid-call (worker side); `transient` when
      │                           the same call may well succeed if sent again (the connection broke, HTTP 5xx)
      ├── BackendTimeout          the backend did not answer within the call's timeout (never transient)
      ├── BackendThrottled        the backend answered 429 (always transient)
      └── BackendUnauthenticated  the backend refused the credentials, or the tenant has none (never transient)
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


class CredentialNotFound(MCPBatchError):
    """The tenant holds no credential for the server."""

    def __init__(self, server: str) -> None:
        super().__init__(f"no credential is set for server {server!r}")
        self.server = server


class ServerNotFound(CredentialNotFound):
    """No server of that name is configured for the caller's key (connecting one answers as a missing credential)."""

    def __init__(self, server: str) -> None:
        MCPBatchError.__init__(self, f"no server named {server!r} is configured for this key")
        self.server = server


class SealBroken(MCPBatchError):
    """A sealed value that no configured key opens (its key was removed, or it was moved or altered)."""


class Backpressure(MCPBatchError):
    """Accepting the batch would put more items in the queue than the service takes; nothing was stored."""

    def __init__(self, unfinished: int, limit: int, retry_after: int) -> None:
        super().__init__(
            f"the service has {unfinished} unfinished items and takes at most {limit}; try again in {retry_after}s"
        )
        self.retry_after = retry_after


class TenantBackpressure(Backpressure):
    """Accepting the batch would put the tenant past its own ceiling of unfinished items (its key's); the count is
    the tenant's own, never the service's, so it tells nothing of other tenants' work."""

    def __init__(self, unfinished: int, limit: int, retry_after: int) -> None:
        MCPBatchError.__init__(
            self,
            f"the tenant has {unfinished} unfinished items and its key allows at most {limit}; try again in "
            f"{retry_after}s",
        )
        self.retry_after = retry_after


class StoredBytesCeiling(Backpressure):
    """The tenant's batches already hold so many bytes in the store that this one would pass its ceiling."""

    def __init__(self, stored: int, adding: int, ceiling: int, retry_after: int) -> None:
        MCPBatchError.__init__(
            self,
            f"the tenant stores {stored} bytes of batches and may store at most {ceiling}; this batch adds {adding}"
            " (older batches free theirs when they expire)",
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


class InvalidCursor(InvalidBatch):
    """A cursor that does not verify, or names something it cannot be used for; `reason` says why, never the cursor."""

    def __init__(self, reason: str) -> None:
        super().__init__([Problem(("cursor",), reason, "invalid_cursor")])
        self.reason = reason


class Conflict(MCPBatchError):
    """The request is well-formed but cannot be carried out as things stand; the message says why."""


class BatchAlreadyFinished(Conflict):
    """The batch has ended (`status` says how); cancelling it changes nothing."""

    def __init__(self, batch_id: str, status: str) -> None:
        super().__init__(f"batch {batch_id!r} has already ended: it is {status}")
        self.batch_id = batch_id
        self.status = status


class BatchNotEnded(Conflict):
    """The batch is still `status` (queued, running, cancelling): only an ended batch can be deleted."""

    def __init__(self, batch_id: str, status: str) -> None:
        super().__init__(
            f"batch {batch_id!r} is {status}: only an ended batch can be deleted; cancel it first "
            f"(POST /v1/batches/{batch_id}/cancel) and delete it once it has ended"
        )
        self.batch_id = batch_id
        self.status = status


class CredentialNotAccepted(Conflict):
    """The server takes no secret from the tenant: its credential is the operator's, or comes from an OAuth connect."""


class IdempotencyConflict(Conflict):
    """The Idempotency-Key was used before with a different request (which is never repeated back)."""

    def __init__(self) -> None:
        super().__init__("this Idempotency-Key was already used with a different request")


class IdempotencyInProgress(Conflict):
    """The first request with this Idempotency-Key has not finished storing its batch; try again shortly."""

    def __init__(self) -> None:
        super().__init__("a request with this Idempotency-Key is still in progress; try again shortly")


class NotRetryable(Conflict):
    """The batch cannot be retried."""


class BatchNotFinished(NotRetryable):
    """Only a finished batch can be retried."""

    def __init__(self, batch_id: str, status: str) -> None:
        super().__init__(f"batch {batch_id!r} is {status}: only a finished batch can be retried")
        self.batch_id = batch_id
        self.status = status


class NothingToRetry(NotRetryable):
    """Every item of the batch succeeded."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"nothing to retry: every item of batch {batch_id!r} succeeded")
        self.batch_id = batch_id


class HostNotAllowed(MCPBatchError):
    """The request names a host the service is not configured to serve under; the message names the setting."""

    def __init__(self) -> None:
        super().__init__(
            "the Host header names a host this service does not serve under: add it to MCP_BATCH_ALLOWED_HOSTS "
            "(requests to loopback names and to the address the service listens on are always served)"
        )


class Unauthenticated(MCPBatchError):
    """No API key, or one the keys file does not hold."""


class Forbidden(MCPBatchError):
    """The caller may not do what the request asks; `problems` names each call or field at fault, `right` the right
    that would allow it (when one would)."""

    def __init__(self, problems: list[Problem], right: str | None = None) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc))}: {p.msg}" for p in problems))
        self.problems = problems
        self.right = right


class BackendError(MCPBatchError):
    """A backend failed outside the tool's own answer (unreachable, crashed, protocol error).

    `transient` marks a failure of the moment (the connection broke, HTTP 5xx, 429): a read-only or idempotent call
    may be sent again. A timeout, a protocol error or any other 4xx is not: repeating it would fail the same way or
    double the load.
    """

    code = "backend_error"

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class BackendTimeout(BackendError):
    """The backend did not answer in time."""

    code = "timeout"


class BackendThrottled(BackendError):
    """The backend answered 429; `retry_after` is its Retry-After in seconds, if it gave one."""

    code = "backend_rate_limited"

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message, transient=True)
        self.retry_after = retry_after


class BackendUnauthenticated(BackendError):
    """The backend refused the credentials (HTTP 401 or 403), or the tenant has none for it; `connect` names the
    route that gives it one, when the credential is the tenant's."""

    code = "backend_unauthenticated"

    def __init__(self, message: str, connect: str | None = None) -> None:
        super().__init__(message)
        self.connect = connect


class ReplicaWaitFailed(MCPBatchError):
    """A write's claim was not confirmed on `wanted` replicas within `timeout` seconds (`acked`: how many confirmed;
    None: Redis failed mid-wait), so the call is not sent: in a failover the claim could be lost."""

    def __init__(self, acked: int | None, wanted: int, timeout: float) -> None:
        got = "Redis failed during the wait" if acked is None else f"{acked} of {wanted} replicas confirmed it"
        super().__init__(
            f"the item's claim was not confirmed on the replicas within {timeout:g} s ({got}); the call was not "
            "sent, so it cannot have run: retry the batch to run it"
        )
        self.acked, self.wanted, self.timeout = acked, wanted, timeout


class OAuthUnavailable(MCPBatchError):
    """An OAuth-protected backend's authorization server could not be found or used (`reason` says which step
    failed, never a token or a code); connecting can be tried again."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"server {server!r}: {reason}")
        self.server, self.reason = server, reason


class OAuthGrantRefused(MCPBatchError):
    """The authorization server refused a grant (a code, a refresh token): the tenant must connect again."""
