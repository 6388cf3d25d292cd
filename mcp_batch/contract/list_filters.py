"""A listing's filters as the query gives them: `metadata.<key>=<value>` pairs (all must match) and
`created_after` / `created_before` (each an RFC 3339 date-time with its offset, or seconds since the epoch). Pure:
every fault is a problem naming its query parameter, never its value."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from mcp_batch import metadata
from mcp_batch.errors import InvalidBatch, Problem
from mcp_batch.store.tenant_index import Filters

TIME_FORMAT = "an RFC 3339 date-time with its offset (2026-12-01T08:00:00Z) or seconds since the epoch (1796112000)"
_EPOCH = re.compile(r"\d{1,11}(\.\d{1,6})?")  # up to the year 5138: a float of seconds keeps its µs


def _micros(name: str, value: str, problems: list[Problem]) -> int | None:
    """The time `value` names, in µs since the epoch (the tenant's list's scores); None and a problem when it names
    none."""
    if _EPOCH.fullmatch(value):
        return round(float(value) * 1_000_000)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        when = None
    if when is None or "T" not in value.upper() or when.tzinfo is None:
        problems.append(Problem(("query", name), f"expected {TIME_FORMAT}", "datetime_parsing"))
        return None
    return round(when.timestamp() * 1_000_000)


def filters(query: Iterable[tuple[str, str]], created_after: str | None, created_before: str | None) -> Filters:
    """The filters of a listing's query (every `metadata.` parameter in it); InvalidBatch naming each fault."""
    problems: list[Problem] = []
    pairs: dict[str, str] = {}
    for name, value in query:
        if not name.startswith(metadata.QUERY_PREFIX):
            continue
        key = name.removeprefix(metadata.QUERY_PREFIX)
        if key in pairs:
            problems.append(Problem(("query", metadata.QUERY_PREFIX + metadata.shown_key(key)), "given twice"))
        pairs[key] = value
    for problem in metadata.problems(pairs):
        where = metadata.QUERY_PREFIX + str(problem.loc[1]) if len(problem.loc) > 1 else metadata.QUERY_PREFIX + "*"
        problems.append(Problem(("query", where), problem.msg, problem.type))
    after = None if created_after is None else _micros("created_after", created_after, problems)
    before = None if created_before is None else _micros("created_before", created_before, problems)
    if problems:
        raise InvalidBatch(problems)
    return Filters(pairs, after, before)
