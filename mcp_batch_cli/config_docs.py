"""docs/configuration.md, rendered from the settings' own `Field` descriptions, types, bounds and defaults.

    uv run python -m mcp_batch_cli.config_docs > docs/configuration.md

tests/mcp_batch_cli/test_config_docs.py fails when the file no longer matches what `render()` makes, so the reference
cannot drift from `mcp_batch/settings.py`. Secret settings are listed without a value.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from mcp_batch.settings import Settings

COMMAND = "uv run python -m mcp_batch_cli.config_docs > docs/configuration.md"

# Each group starts at its first field, in the order the fields are declared; a field added later falls into the
# group of the field declared before it, so the table never loses one.
GROUPS: dict[str, str] = {
    "oauth_issuers": "Signing in, and tenants' credentials for backends",
    "mcp_task_wait_seconds": "The MCP door: tasks, listens, the proxy",
    "redis_url": "Where things are, and who may call",
    "max_calls_per_batch": "Batches: sizes, concurrency, retention, backpressure",
    "max_argument_bytes": "Calls and responses",
    "default_timeout_seconds": "Backends",
    "limit_max_wait_seconds": "Backend limits",
    "max_shards": "Workers: shards, leases, stopping",
    "retry_base_seconds": "Retries and Redis outages",
    "events_check_seconds": "Event streams",
    "webhook_allow": "Completion webhooks",
    "max_body_bytes": "Hostile input and storage",
    "worker_metrics_port": "Metrics, logs, readiness",
}

_PREAMBLE = f"""\
# Configuration

Every setting is an environment variable, `MCP_BATCH_` and the field's name in capitals, read once at start-up by
`mcp-batch api`, `mcp-batch worker`, `mcp-batch status` and `mcp-batch dev` (which sets the Redis URL, the servers
file and `MCP_BATCH_AUTH=none` itself). A value that does not fit its type or bounds stops start-up with a
validation error naming the field. Lists are written as JSON
(`MCP_BATCH_WEBHOOK_ALLOW='["https://hooks.example.com/"]'`); booleans as `true` or `false`. Secret settings are
listed without a value.

The servers file and the keys file are described in [operations.md](operations.md).

<!-- Generated from mcp_batch/settings.py by mcp_batch_cli/config_docs.py: do not edit by hand. Regenerate with
     {COMMAND} -->
"""

_TYPE_NAMES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Path: "path",
    SecretStr: "secret",
}


def env_name(field: str) -> str:
    """The environment variable a settings field is read from."""
    return f"{Settings.model_config.get('env_prefix', '')}{field}".upper()


def _type(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(f"`{value}`" for value in args)
    if origin in (Union, types.UnionType):
        named = [_type(arg) for arg in args if arg is not type(None)]
        return " or ".join(named) + (" (optional)" if type(None) in args else "")
    if origin is list:
        return f"JSON list of {_type(args[0])}s" if args else "JSON list"
    return _TYPE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _bounds(info: FieldInfo) -> str:
    signs = []
    for rule in info.metadata:  # annotated_types' Ge, Gt, Le, Lt, as Field(ge=..., ...) makes them
        for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(rule, attribute, None)
            if isinstance(value, int | float):
                signs.append(f"{sign} {_number(value)}")
    return ", ".join(signs)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True, validated_data={})
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return "(set; not shown)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`[]`" if not value else "`" + ", ".join(map(str, value)) + "`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _row(name: str, info: FieldInfo) -> str:
    kind = _type(info.annotation)
    bounds = _bounds(info)
    cells = [f"`{env_name(name)}`", f"{kind}, {bounds}" if bounds else kind, _default(info), info.description or ""]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def render() -> str:
    """The whole of docs/configuration.md."""
    groups: list[tuple[str, list[str]]] = []
    for name, info in Settings.model_fields.items():
        if not groups or name in GROUPS:
            groups.append((GROUPS.get(name, "Settings"), []))
        groups[-1][1].append(_row(name, info))
    sections = [
        "\n".join([f"## {title}", "", "| variable | type | default | meaning |", "| --- | --- | --- | --- |", *rows])
        for title, rows in groups
    ]
    return "\n\n".join([_PREAMBLE.rstrip("\n"), *sections]) + "\n"


def main() -> None:
    """Print the rendered page; redirect it into docs/configuration.md."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
