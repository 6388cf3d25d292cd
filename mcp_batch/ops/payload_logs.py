"""Keeping payloads out of logs. At DEBUG the MCP SDK prints every JSON-RPC message it sends and receives, and
sse-starlette every chunk it streams; those carry call arguments (which may be secrets) and tool results. A filter
drops exactly those lines; everything else those loggers say stays."""

from __future__ import annotations

import logging

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


_FILTERS = {name: DropPayloads(prefixes) for name, prefixes in _PAYLOAD_LINES.items()}


def keep_payloads_out_of_logs() -> None:
    """Attach the filters (once; calling again changes nothing). The API and the worker call this at start-up."""
    for name, drop in _FILTERS.items():
        logging.getLogger(name).addFilter(drop)
