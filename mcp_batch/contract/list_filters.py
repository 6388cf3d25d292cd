"""A listing's filters as the query gives them: `metadata.<key>=<value>` pairs (all must match) and
`created_after` / `created_before` (each an RFC 3339 date-time with its offset, or seconds since the epoch). Pure:
every fault is a problem naming its query parameter, never its value."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from mcp_batch import metadata
from mcp_batch.errors import InvalidBatch, Problem
from mcp_batch.store.tenant_index import Filters

TIME_FORMAT = "an RFC 3339 date-time with its offset (2026-12-01T08:00:00Z) or seconds since the epoch (1796112000)"
EPOCH_PATTERN = r"\d{1,11}(\.\d{1,6})?"  # up to the year 5138: a float of seconds keeps its µs
_EPOCH = re.compile(EPOCH_PATTERN)
_RFC_3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))")


def _rfc_3339(value: str) -> datetime | None:
    """RFC 3339's date-time (`T` or `t`, `Z` or `z`, a leap second read as the second before), or None."""
    found = _RFC_3339.fullmatch(value)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = found.groups()
    try:
        offset = timedelta(0) if zulu else timedelta(hours=int(off_h), minutes=int(off_m)) * (1 if sign == "+" else -1)
        micros = int((fraction or "0")[:6].ljust(6, "0"))
        wall = (int(year), int(month), int(day), int(hour), int(minute), min(int(second), 59), micros)
        return datetime(*wall, tzinfo=timezone(offset))
    except ValueError:  # no such day, hour or offset
        return None


def _micros(name: str, value: str, problems: list[Problem]) -> int | None:
    """The time `value` names, in µs since the epoch (the tenant's list's scores); None and a problem when it names
    none."""
    if _EPOCH.fullmatch(value):
        return round(float(value) * 1_000_000)
    when = _rfc_3339(value)
    if when is None:
        problems.append(Problem(("query", name), f"expected {TIME_FORMAT}", "datetime_parsing"))
        return None
    try:
        return round(when.timestamp() * 1_000_000)
    except OverflowError:  # year 1 with an offset that takes it before the first day
        return 0


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
