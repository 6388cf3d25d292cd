"""A backend's log notifications (`notifications/message`), into the worker's own log at debug level.

They name the item: a notification carries no request id, so it is put down to the calls in flight on the
session when it arrives (the one item, when only one is). Never stored with an item: a log is not a result.
"""

from __future__ import annotations

import logging

import orjson
from mcp_types import LoggingLevel, LoggingMessageNotificationParams

from mcp_batch.ops import logs

logger = logging.getLogger(__name__)

_MAX_CHARS = 500  # of a log's data, as JSON: a line of the worker's log, not a payload dump
_MAX_NAMED = 8  # items named when more are in flight


class BackendLogs:
    """The logging callback of one backend's session, and the items it has in flight."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.calling: list[str] = []  # the item ids of the calls in flight, by `sending`

    @property
    def level(self) -> LoggingLevel | None:
        """The level to ask a 2026-07-28 server for: debug when it would be written, else none (no logs sent)."""
        return "debug" if logger.isEnabledFor(logging.DEBUG) else None

    def sending(self) -> str:
        """Note the current item (the worker binds its id to the log context) as in flight; returns its id."""
        item = str(logs.bound().get("item_id", ""))
        self.calling.append(item)
        return item

    def answered(self, item: str) -> None:
        self.calling.remove(item)

    async def received(self, params: LoggingMessageNotificationParams) -> None:
        """The session's logging callback: one line of the worker's log, at debug level."""
        if not logger.isEnabledFor(logging.DEBUG):
            return
        items = ",".join(self.calling[:_MAX_NAMED]) + (",..." if len(self.calling) > _MAX_NAMED else "")
        try:
            data = orjson.dumps(params.data).decode()[:_MAX_CHARS]
        except TypeError:
            data = type(params.data).__name__
        where = f" ({params.logger})" if params.logger else ""
        logger.debug("backend %s logged %s%s during item %s: %s", self.server, params.level, where, items, data)
