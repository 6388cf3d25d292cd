"""How a command fails: a message for the user and an exit code; the client's exceptions turned into both.

CommandError          a command failed; `str()` is the message                 exit 1
  └─ BadBatch         the file or the batch is wrong, found here or by the
                      server's 422; nothing was sent or stored                 exit 2
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp_batch.client import ClientError, InvalidRequest, NotFound, ServiceError, Unreachable


class CommandError(Exception):
    """A command failed; `str()` is the message for the user."""

    exit_code = 1


class BadBatch(CommandError):
    """The batch cannot be sent as it is, or the server rejected it."""

    exit_code = 2

    def __init__(self, heading: str, problems: Sequence[str] = ()) -> None:
        super().__init__("\n  ".join([heading, *problems]))


def explained(
    exc: ClientError,
    batch_id: str | None = None,
    item_id: str | None = None,
    looked: str | None = None,
    rejected: str = "the server rejected the batch, nothing was stored:",
) -> CommandError:
    """The message for a client error: which batch or item is missing, what the server rejected, or that it could
    not be reached (and, when the URL was only the default, where the command looked for one)."""
    if isinstance(exc, Unreachable):
        return CommandError(f"{exc}; {looked}" if looked else str(exc))
    if not isinstance(exc, ServiceError):
        return CommandError(str(exc))
    if isinstance(exc, InvalidRequest) and exc.problems:
        heading = rejected if exc.url else "not a valid batch, nothing was sent:"  # no URL: the client's own check
        return BadBatch(heading, [p.describe() for p in exc.problems])
    if isinstance(exc, NotFound):
        if exc.detail == "Not Found":  # the route, not the batch (an older server)
            return CommandError(f"{exc.url} does not exist on this server (is it an older mcp-batch?)")
        if item_id is not None and "has no item" in str(exc.detail):
            return CommandError(f"no item {item_id!r} in batch {batch_id!r}")
        if batch_id is not None:
            base = exc.url.split("/v1/", 1)[0]
            return CommandError(f"no batch {batch_id!r} at {base} (unknown, or expired)")
    if exc.problems:
        return CommandError(
            "\n  ".join([f"the server answered {exc.status_code}:", *(p.describe() for p in exc.problems)])
        )
    return CommandError(f"the server answered {exc.status_code}: {exc.detail or str(exc).split(': ', 1)[-1]}")
