"""Keeping payloads and query values out of logs. At DEBUG the MCP SDK prints every JSON-RPC message it sends and
receives, and sse-starlette every chunk it streams; those carry call arguments (which may be secrets) and tool
results. A filter drops exactly those lines; everything else those loggers say stays. uvicorn's access log and
httpx's request lines name URLs with their query strings, whose values may be tokens (a webhook URL's): another
filter writes them with the values taken out (redaction.py)."""

from __future__ import annotations

import logging
from typing import Any

from mcp_batch.ops.redaction import redacted_url

# Logger -> how its payload lines start (the SDK formats them with f-strings, sse-starlette with %s).
_PAYLOAD_LINES = {
    "mcp.client.streamable_http": ("Sending client message", "SSE message"),
    "mcp.client.sse": ("Sending client message", "Received server message"),
    "mcp.server.sse": ("Sending message via SSE",),
    "sse_starlette.sse": ("chunk:",),
}


class DropPayloads(logging.Filter):
    """Refuses the records of one logger whose message starts with one of `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.prefixes))


class RedactQueries(logging.Filter):
    """Rewrites a record's arguments that are URLs or request targets with a query, its values taken out."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(arg) for arg in record.args)
        return True


def _redacted(arg: Any) -> Any:
    if isinstance(arg, str):
        return redacted_url(arg) if "?" in arg else arg
    if type(arg).__name__ == "URL" and hasattr(arg, "query"):  # httpx's (and httpx2's) URL
        return redacted_url(str(arg))
    return arg


_FILTERS: dict[str, logging.Filter] = {name: DropPayloads(prefixes) for name, prefixes in _PAYLOAD_LINES.items()}
_QUERIES = RedactQueries()
_URL_LOGGERS = ("uvicorn.access", "httpx", "httpx2")  # the loggers whose lines name requested URLs


def keep_payloads_out_of_logs() -> None:
    """Attach the filters (once; calling again changes nothing). The API and the worker call this at start-up."""
    for name, drop in _FILTERS.items():
        logging.getLogger(name).addFilter(drop)
    for name in _URL_LOGGERS:
        logging.getLogger(name).addFilter(_QUERIES)
