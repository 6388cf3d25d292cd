"""Logging for `mcp-batch api`, `worker` and `dev`: readable text, or one JSON object per line (MCP_BATCH_LOG_FORMAT).

Ids come from a context variable, not from each call site: the worker binds the batch and job once per job and the
item once per claim (`bind`), and every line logged under it, by any module, carries them. Asyncio tasks copy the
context when they are created, so a job's lanes inherit its batch and each lane binds its own item.

Log lines name ids, servers, tools and sizes; never argument values, results or backend headers and env.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Mapping
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

# The fields a line may carry besides ts, level, logger and message, in the order they are written.
FIELDS = ("batch_id", "job", "item_id", "index", "server", "worker")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET = ("httpx", "httpx2", "mcp")  # a log line per backend request would cost more than the call

_context: ContextVar[Mapping[str, Any]] = ContextVar("mcp_batch_log_context", default=MappingProxyType({}))


def bind(**fields: Any) -> Token[Mapping[str, Any]]:
    """Add `fields` to every line logged from here on in this task (and the tasks it starts)."""
    return _context.set({**_context.get(), **fields})


def bound() -> Mapping[str, Any]:
    """The fields bound in the current context."""
    return _context.get()


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (a field given in `extra=` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in _context.get().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, the bound ids present, exc_info as text."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(fmt: str, level: int = logging.INFO) -> None:
    """Send every record (uvicorn's, arq's and Python warnings too) to stderr in `fmt` ('text' or 'json'), with the
    bound ids."""
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    logging.captureWarnings(True)  # a library's warning is a record too, not a stray line of text
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)


def stack_only(exc: BaseException) -> str:
    """`exc`'s traceback and type without its message, which may quote a value the failing code was given."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"Traceback (most recent call last):\n{frames}{type(exc).__qualname__} (message withheld)"
