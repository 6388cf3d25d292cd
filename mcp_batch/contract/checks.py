"""The per-call checks made before a call is dispatched: pure functions, shared by the worker and the dry run.

A call that fails one is never sent to its backend; it ends with the status and error returned here. No message
repeats an argument value: bounds are named, schema faults give the JSON path and the rule that failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mcp_batch.backend_info import ToolInfo
from mcp_batch.backends.servers_file import Backend
from mcp_batch.models import ItemStatus
from mcp_batch.records import ErrorInfo, error_info

# This service's own batch tools (the MCP front door): a batch may not start batches.
OWN_BATCH_TOOLS = frozenset({"call_tools_batch", "submit_batch"})
MAX_NAME = 200


@dataclass(frozen=True)
class Bounds:
    """Per-call bounds, from settings."""

    max_argument_bytes: int = 20_000
    max_argument_depth: int = 8


@dataclass(frozen=True)
class Refusal:
    """Why a call will not be dispatched."""

    status: ItemStatus
    code: str
    message: str
    details: dict[str, Any] | None = None

    def error(self) -> ErrorInfo:
        kind = "policy" if self.status is ItemStatus.blocked else "validation"
        return error_info(self.code, self.message, kind, **(self.details or {}))


def depth(value: Any) -> int:
    """Nesting depth of a JSON value: a scalar is 0, `{}` and `[]` are 1."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def argument_bytes(arguments: dict[str, Any]) -> int:
    """The size that MCP_BATCH_MAX_ARGUMENT_BYTES bounds: the arguments serialized compactly, in UTF-8."""
    try:
        return len(orjson.dumps(arguments))
    except TypeError:  # what orjson refuses and json takes: an integer past 64 bits
        return len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode())


def check_bounds(server: str, tool: str, arguments: dict[str, Any], bounds: Bounds) -> Refusal | None:
    """Names and arguments within their bounds (checked before anything else: no backend knowledge needed)."""
    for field, name in (("server", server), ("tool", tool)):
        if len(name) > MAX_NAME:
            return Refusal(ItemStatus.invalid_call, "bound_exceeded", f"{field} name is over {MAX_NAME} characters")
    size = argument_bytes(arguments)
    if size > bounds.max_argument_bytes:
        message = f"arguments are {size} bytes serialized, over the bound of {bounds.max_argument_bytes}"
        return Refusal(ItemStatus.invalid_call, "bound_exceeded", message, {"bound": "max_argument_bytes"})
    levels = depth(arguments)
    if levels > bounds.max_argument_depth:
        message = f"arguments nest {levels} levels deep, over the bound of {bounds.max_argument_depth}"
        return Refusal(ItemStatus.invalid_call, "bound_exceeded", message, {"bound": "max_argument_depth"})
    return None


def check_policy(tool: str, info: ToolInfo | None, backend: Backend, read_only: bool) -> Refusal | None:
    """The read-only gate: deny lists, then (for read-only batches) annotations or the server's read-only list."""
    if tool in OWN_BATCH_TOOLS:
        return Refusal(ItemStatus.blocked, "nested_batch", f"{tool!r} is a batch tool: batches do not nest")
    if tool in backend.deny_tools:
        return Refusal(ItemStatus.blocked, "denied", f"tool {tool!r} is denied by the servers file")
    if read_only:
        annotated = bool(info and info.annotations and info.annotations.get("readOnlyHint") is True)
        if not (annotated or tool in backend.read_only_tools):
            message = f"tool {tool!r} is not read-only and the batch is read_only (set read_only: false to run it)"
            return Refusal(ItemStatus.blocked, "not_read_only", message)
    return None


def _path(parts: Any) -> str:
    return ".".join(str(p) for p in parts)


_validators: dict[int, tuple[dict[str, Any], Draft202012Validator, Any]] = {}


def _validators_for(schema: dict[str, Any]) -> tuple[Draft202012Validator, Any]:
    # Built once per schema object (a session's tool list), not per call: building one costs more than using it.
    # The compiled one (jsonschema-rs) answers the common case; None when it cannot take the schema.
    cached = _validators.get(id(schema))
    if cached is None or cached[0] is not schema:
        if len(_validators) > 1024:
            _validators.clear()
        try:
            fast: Any = jsonschema_rs.Draft202012Validator(schema, validate_formats=False)
        except Exception:  # a schema it refuses or cannot compile: the reference validator judges alone
            fast = None
        cached = _validators[id(schema)] = (schema, Draft202012Validator(schema), fast)
    return cached[1], cached[2]


def check_schema(arguments: Mapping[str, Any], schema: dict[str, Any]) -> Refusal | None:
    """Arguments against the tool's inputSchema; the first fault by path, without the value. A call is refused
    only when the reference validator (jsonschema) finds a fault; the compiled one only spares it the valid calls."""
    try:
        validator, fast = _validators_for(schema)
        if fast is not None and fast.is_valid(arguments):
            return None
        if validator.is_valid(arguments):  # the common case, without collecting errors
            return None
        error = next(iter(sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))), None)
    except SchemaError:
        return None  # the backend's schema is broken: let the backend judge the call
    if error is None:
        return None
    param = _path(error.absolute_path)
    where = f"argument {param!r}" if param else "arguments"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        param = _path([*error.absolute_path, missing[0]]) if missing else param
        message = f"missing required argument {param!r}"
    elif error.validator == "additionalProperties":
        message = f"{where} has a property the tool does not accept"
    elif error.validator == "type":
        message = f"{where} must be of type {error.validator_value}"
    else:
        message = f"{where} fails the schema rule {error.validator!r}"
    details = {"param": param, "rule": str(error.validator), "schema_path": _path(error.absolute_schema_path)}
    return Refusal(ItemStatus.invalid_call, "invalid_arguments", message, details)


def check_call(
    server: str, tool: str, arguments: dict[str, Any], backend: Backend | None, bounds: Bounds
) -> Refusal | None:
    """What needs no tool list: bounds, a known server, the servers file's deny list and the no-nesting rule."""
    refusal = check_bounds(server, tool, arguments, bounds)
    if refusal is not None:
        return refusal
    if backend is None:
        return Refusal(ItemStatus.unknown_server, "unknown_server", f"server {server!r} is not configured")
    return check_policy(tool, None, backend, read_only=False)


def check_tool(
    server: str, tool: str, arguments: dict[str, Any], backend: Backend, tools: Mapping[str, ToolInfo], read_only: bool
) -> Refusal | None:
    """What needs the backend's tool list: a known tool, the read-only gate, the input schema."""
    info = tools.get(tool)
    if info is None:
        return Refusal(ItemStatus.unknown_tool, "unknown_tool", f"server {server!r} has no tool {tool!r}")
    return check_policy(tool, info, backend, read_only) or check_schema(arguments, info.input_schema)


def precheck(
    server: str,
    tool: str,
    arguments: dict[str, Any],
    backend: Backend | None,
    tools: Mapping[str, ToolInfo] | None,
    read_only: bool,
    bounds: Bounds,
) -> Refusal | None:
    """Every local check in order; `tools` None means the backend's tool list is not known."""
    refusal = check_call(server, tool, arguments, backend, bounds)
    if refusal is not None or backend is None or tools is None:
        return refusal
    return check_tool(server, tool, arguments, backend, tools, read_only)
