"""A batch file read and checked before anything is sent: JSON (the POST /v1/batches body) or JSON Lines (one call
per line, sent as it is; the server checks it line by line)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from mcp_batch.client import Problem
from mcp_batch.contract.validation import validate_batch
from mcp_batch.errors import InvalidBatch
from mcp_batch.models import BatchRequest
from mcp_batch_cli.command_errors import BadBatch

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")


def is_json_lines(source: str) -> bool:
    return source != "-" and source.lower().endswith(JSON_LINES_SUFFIXES)


def readable(source: str) -> Path:
    """A JSON Lines file that exists and can be opened (its lines are the server's to check)."""
    path = Path(source)
    try:
        path.open("rb").close()
    except FileNotFoundError:
        raise BadBatch(f"{source}: no such file") from None
    except OSError as exc:
        raise BadBatch(f"{source}: cannot be read ({exc.strerror})") from None
    return path


def load_batch(source: str, stdin: IO[bytes] | None = None) -> BatchRequest:
    """Read and check a JSON batch file (`-`: stdin) before anything is sent; raise BadBatch saying what is wrong.

    Messages name places (line and column, call and field), never values: arguments may hold secrets.
    """
    name = "stdin" if source == "-" else source
    try:
        data = (stdin or sys.stdin.buffer).read() if source == "-" else Path(source).read_bytes()
    except FileNotFoundError:
        raise BadBatch(f"{name}: no such file") from None
    except OSError as exc:
        raise BadBatch(f"{name}: cannot be read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, column = _position(data[: exc.start].decode("utf-8", "replace"))
        raise BadBatch(f"{name}: not UTF-8 text (line {line}, column {column})") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadBatch(f"{name}: not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(body, dict):
        kind = _JSON_KINDS.get(type(body), "something else")
        raise BadBatch(f"{name}: holds no batch: expected a JSON object with `calls`, found {kind}")
    heading = f"{name}: not a valid batch, nothing was sent:"
    try:
        request = BatchRequest.model_validate(body)
    except ValidationError as exc:
        # include_input=False: pydantic would otherwise carry the submitted value along with each error
        errors = exc.errors(include_input=False, include_url=False)
        raise BadBatch(heading, [Problem(tuple(e["loc"]), e["msg"]).describe() for e in errors]) from None
    try:
        # Only the server knows its limits (most calls, highest max_concurrency); it checks those itself.
        unlimited = sys.maxsize
        validate_batch(request, unlimited, unlimited, default_concurrency=1, response_ceiling=unlimited)
    except InvalidBatch as exc:
        raise BadBatch(heading, [Problem(p.loc, p.msg).describe() for p in exc.problems]) from None
    return request


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
_JSON_KINDS[type(None)] = "null"


def _position(before: str) -> tuple[int, int]:
    lines = before.split("\n")
    return len(lines), len(lines[-1]) + 1
