"""Whole-batch checks made before anything is stored: pure functions over the parsed request.

A 100,000-call batch is checked in a fraction of a second: `_clean` makes sure, a whole batch at a time, that no
call has a fault (ids as one set and one string, arguments measured by orjson, many calls' at once), and only a
batch that has one is checked call by call, for the faults in order and their messages.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import orjson

from mcp_batch import metadata
from mcp_batch.contract.checks import argument_bytes
from mcp_batch.contract.webhook_policy import WebhookPolicy
from mcp_batch.errors import InvalidBatch, Problem
from mcp_batch.models import BatchRequest, Call


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
    if not _clean(request.calls, timeout_ceiling, max_argument_bytes):
        problems += _call_problems(request.calls, timeout_ceiling, max_argument_bytes)
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
    problems += metadata.problems(request.metadata)
    if problems:
        raise InvalidBatch(problems)
    return request.max_concurrency or default_concurrency


def _call_problems(calls: list[Call], timeout_ceiling: float, max_argument_bytes: int | None) -> list[Problem]:
    """Each call's faults, call by call: its id (a dot, an unprintable character, the id of an earlier call), the
    size of its arguments, its timeout."""
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for index, call in enumerate(calls):
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
        if max_argument_bytes is not None and (size := _over(call.arguments, max_argument_bytes)) is not None:
            message = f"arguments are {size} bytes serialized, over the bound of {max_argument_bytes}"
            problems.append(
                Problem(("calls", index, "arguments"), f"{message} (MCP_BATCH_MAX_ARGUMENT_BYTES)", "too_large")
            )
        if call.timeout_seconds is not None and call.timeout_seconds > timeout_ceiling:
            where = ("calls", index, "timeout_seconds")
            problems.append(Problem(where, f"at most {timeout_ceiling:g}", "less_than_equal"))
    return problems


def _clean(calls: list[Call], timeout_ceiling: float, max_argument_bytes: int | None) -> bool:
    """True when `_call_problems` finds nothing, found out a whole batch at a time (most of it at C speed)."""
    named = [call.id for call in calls if call.id is not None]
    if named:  # the index stands for an id not given: the ids, as `_call_problems` compares them
        ids = [str(index) if call.id is None else call.id.casefold() for index, call in enumerate(calls)]
        if len(set(ids)) != len(ids) or "." in "".join(ids) or _CONTROLS.search("".join(named)):
            return False
    timeouts = [call.timeout_seconds for call in calls if call.timeout_seconds is not None]
    if timeouts and max(timeouts) > timeout_ceiling:
        return False
    if max_argument_bytes is None:
        return True
    for start in range(0, len(calls), _SIZE_CHUNK):
        arguments = [call.arguments for call in calls[start : start + _SIZE_CHUNK]]
        try:  # each call's arguments are a part of their list, written as one
            if (1 + _FLOAT_SLACK) * len(orjson.dumps(arguments)) <= max_argument_bytes:
                continue
        except orjson.JSONEncodeError:  # an integer over 64 bits
            pass
        if any(_over(one, max_argument_bytes) is not None for one in arguments):
            return False
    return True


_SIZE_CHUNK = 64  # calls whose arguments' sizes are bounded at once


# Where orjson writes a float otherwise than `json.dumps` (`1e-05` is `0.00001`), the lengths differ by 2 bytes at
# most; every float it writes holds a '.' or an 'e', so counting those bounds the difference.
_FLOAT_SLACK = 4


def _over(arguments: dict[str, Any], bound: int) -> int | None:
    """`argument_bytes(arguments)` when it is over `bound`, else None; measured exactly only when orjson's length
    (the same compact UTF-8 JSON, floats aside) does not settle it."""
    try:
        written = orjson.dumps(arguments)
    except orjson.JSONEncodeError:  # an integer over 64 bits
        written = None
    if written is not None:
        if (1 + _FLOAT_SLACK) * len(written) <= bound:  # however many of its bytes are floats
            return None
        if len(written) + _FLOAT_SLACK * (written.count(b".") + written.count(b"e")) <= bound:
            return None
    size = argument_bytes(arguments)
    return size if size > bound else None


_SEPARATORS = frozenset("\u2028\u2029")  # line and paragraph separators: a line break to JSON Lines readers and logs
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # what `_unprintable` looks for (Cc is exactly these)


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
