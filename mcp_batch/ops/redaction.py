"""Query strings with their values taken out, for what is logged or traced: a value may be a token (a webhook URL's,
a caller's), and a query's names are enough to read a log by. `a=1&b=x` becomes `a=REDACTED&b=REDACTED` (the
OpenTelemetry semantic conventions' word for it)."""

from __future__ import annotations

REDACTED = "REDACTED"

# Span attributes that hold a query string, and those that hold a URL or a request target with one.
QUERY_ATTRIBUTES = frozenset({"url.query", "http.query"})
URL_ATTRIBUTES = frozenset({"url.full", "url.original", "http.url", "http.target"})


def redacted_query(query: str) -> str:
    """Every value of `query` (no leading `?`) replaced; names kept, a name without a value left as it is."""
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        parts.append(f"{name}={REDACTED}" if equals else part)
    return "&".join(parts)


def redacted_url(url: str) -> str:
    """A URL or a request target (`/path?query`) with its query's values replaced (and any fragment dropped)."""
    head, mark, rest = url.partition("?")
    if not mark:
        return url
    return f"{head}?{redacted_query(rest.partition('#')[0])}"
