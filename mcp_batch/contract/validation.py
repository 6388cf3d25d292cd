"""Whole-batch checks made before anything is stored: pure functions over the parsed request."""

from __future__ import annotations

import unicodedata

from mcp_batch.contract.checks import argument_bytes
from mcp_batch.contract.webhook_policy import WebhookPolicy
from mcp_batch.errors import InvalidBatch, Problem
from mcp_batch.models import BatchRequest


def validate_batch(
    request: BatchRequest,
    max_calls: int,
    concurrency_ceiling: int,
    default_concurrency: int,
    response_ceiling: int = 10_000_000,
    retention_ceiling: int = 7 * 86_400,
    timeout_ceiling: float = 3_600.0,
    webhooks: WebhookPolicy | None = None,
    max_argument_bytes: int | None = None,
) -> int:
    """Check the batch as a whole; return its effective max_concurrency or raise InvalidBatch listing every fault.

    `webhooks`: where a `webhook_url` may point (None: not checked here, e.g. by a client that cannot know).
    `max_argument_bytes`: a call whose arguments are larger refuses the batch before anything is stored (None: not
    checked here)."""
    problems: list[Problem] = []
    if not request.calls:
        problems.append(Problem(("calls",), "a batch needs at least one call", "too_short"))
    if len(request.calls) > max_calls:
        problems.append(
            Problem(("calls",), f"{len(request.calls)} calls, more than the maximum of {max_calls}", "too_long")
        )
    seen: dict[str, int] = {}
    for index, call in enumerate(request.calls):
        call_id = (call.id if call.id is not None else str(index)).casefold()  # ids differing only in case clash
        if "." in call_id:
            problems.append(Problem(("calls", index, "id"), "an id may not contain '.' (references use dots)"))
        elif (unprintable := _unprintable(call.id or "")) is not None:
            problems.append(Problem(("calls", index, "id"), unprintable))
        if call_id in seen:
            problems.append(
                Problem(("calls", index, "id"), f"duplicate id: call {index} has the id of call {seen[call_id]}")
            )
        else:
            seen[call_id] = index
        if max_argument_bytes is not None and (size := argument_bytes(call.arguments)) > max_argument_bytes:
            message = f"arguments are {size} bytes serialized, over the bound of {max_argument_bytes}"
            problems.append(
                Problem(("calls", index, "arguments"), f"{message} (MCP_BATCH_MAX_ARGUMENT_BYTES)", "too_large")
            )
        if call.timeout_seconds is not None and call.timeout_seconds > timeout_ceiling:
            where = ("calls", index, "timeout_seconds")
            problems.append(Problem(where, f"at most {timeout_ceiling:g}", "less_than_equal"))
    if request.max_concurrency is not None and request.max_concurrency > concurrency_ceiling:
        problems.append(Problem(("max_concurrency",), f"at most {concurrency_ceiling}", "less_than_equal"))
    if request.response_max_bytes is not None and request.response_max_bytes > response_ceiling:
        problems.append(Problem(("response_max_bytes",), f"at most {response_ceiling}", "less_than_equal"))
    if request.retention_seconds is not None and request.retention_seconds > retention_ceiling:
        problems.append(Problem(("retention_seconds",), f"at most {retention_ceiling}", "less_than_equal"))
    if request.webhook_url is not None and webhooks is not None:
        refusal = webhooks.refusal(request.webhook_url)
        if refusal is not None:
            problems.append(Problem(("webhook_url",), refusal, "webhook_refused"))
    if problems:
        raise InvalidBatch(problems)
    return request.max_concurrency or default_concurrency


_SEPARATORS = frozenset("\u2028\u2029")  # line and paragraph separators: a line break to JSON Lines readers and logs


def _unprintable(call_id: str) -> str | None:
    """Why an id cannot be printed on one line, naming the first offending character by code point (never the id),
    or None. Every Unicode control (category Cc: C0, DEL and C1 such as U+0085) and U+2028/U+2029."""
    for position, char in enumerate(call_id, start=1):
        if char in _SEPARATORS or unicodedata.category(char) == "Cc":
            return (
                "an id may not contain control characters or line separators:"
                f" U+{ord(char):04X} at character {position}"
            )
    return None
