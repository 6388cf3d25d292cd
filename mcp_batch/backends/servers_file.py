"""The servers file (`mcpServers` JSON): parse, validate, interpolate `${VAR}`; the backend registry.

A bad file stops start-up with one message naming the server and the field; there is no half-configured start. Two
servers whose tools the MCP door's proxy could give the same name (`evil` and `evil__a`) stop it too.
Header and env values are held as secrets so they never reach a repr, a log line or a response.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from mcp_batch.backend_info import ServerInfo
from mcp_batch.errors import ConfigError
from mcp_batch.models import BackendLimits

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
# The MCP door's proxy names a server's tool `<server>__<tool>` (service/doors/mcp_proxy.py).
PROXY_SEPARATOR = "__"


class RateLimit(BaseModel):
    """A backend's call-rate allowance."""

    model_config = ConfigDict(extra="forbid")

    per_second: float | None = Field(None, gt=0)
    per_minute: float | None = Field(None, gt=0)
    burst: int | None = Field(None, ge=1)


class _BackendBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float | None = Field(None, gt=0)
    max_concurrency: int | None = Field(None, ge=1)
    rate_limit: RateLimit | None = None
    read_only_tools: list[str] = Field(default_factory=list, description="Tools to treat as read-only.")
    deny_tools: list[str] = Field(default_factory=list, description="Tools never dispatched.")


class StdioBackend(_BackendBase):
    """A backend started as a child process, spoken to over stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: str | None = None


class HttpBackend(_BackendBase):
    """A backend reached over streamable HTTP."""

    type: Literal["http"] = "http"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, SecretStr] = Field(default_factory=dict)


Backend = StdioBackend | HttpBackend

_TRANSPORT_ALIASES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http"}


def _interpolate(value: Any, env: Mapping[str, str], server: str, path: str = "") -> Any:
    """Replace `${VAR}` in every string of a parsed JSON value; a missing variable is a ConfigError."""
    if isinstance(value, str):

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"server {server!r}, field {path!r}: environment variable {name} is not set")
            return env[name]

        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [_interpolate(v, env, server, f"{path}.{i}") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _interpolate(v, env, server, f"{path}.{k}" if path else k) for k, v in value.items()}
    return value


def _parse_server(name: str, raw: Any, env: Mapping[str, str]) -> Backend:
    where = f"server {name!r}"
    if not _NAME.match(name):
        raise ConfigError(f"{where}: a server name is 1-200 letters, digits, '_', '.' or '-'")
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be an object, not {type(raw).__name__}")
    raw = dict(raw)
    if "command" in raw and "url" in raw:
        raise ConfigError(f"{where}: give either 'command' (stdio) or 'url' (streamable HTTP), not both")
    declared = raw.pop("type", None) or raw.pop("transport", None)
    if declared is not None:
        if not isinstance(declared, str) or declared not in _TRANSPORT_ALIASES:
            raise ConfigError(f"{where}, field 'type': unknown transport (use 'stdio' or 'http')")
        transport = _TRANSPORT_ALIASES[declared]
    elif "command" in raw:
        transport = "stdio"
    elif "url" in raw:
        transport = "http"
    else:
        raise ConfigError(f"{where}: needs 'command' (stdio) or 'url' (streamable HTTP)")
    raw = _interpolate(raw, env, name)
    model: type[StdioBackend] | type[HttpBackend] = StdioBackend if transport == "stdio" else HttpBackend
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        field = ".".join(str(p) for p in first["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where}, field {field!r}: {first['msg']}{more}") from None


class Registry:
    """The configured backends, by name."""

    def __init__(self, backends: Mapping[str, Backend]) -> None:
        self._backends = dict(backends)

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def __len__(self) -> int:
        return len(self._backends)

    def get(self, name: str) -> Backend | None:
        return self._backends.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._backends)

    def limits(self, names: set[str]) -> dict[str, BackendLimits]:
        """The limits of the named backends that have any (unknown names are skipped)."""
        result = {}
        for name in sorted(names):
            b = self._backends.get(name)
            if b is not None and (b.max_concurrency or b.rate_limit):
                rate = b.rate_limit.model_dump(exclude_none=True) if b.rate_limit else None
                result[name] = BackendLimits(max_concurrency=b.max_concurrency, rate_limit=rate)
        return result

    def info(self, name: str, default_timeout: float) -> ServerInfo:
        """A backend's public description: never its headers or env."""
        b = self._backends[name]
        return ServerInfo(
            name=name,
            transport=b.type,
            timeout_seconds=b.timeout_seconds or default_timeout,
            max_concurrency=b.max_concurrency,
            rate_limit=b.rate_limit.model_dump(exclude_none=True) if b.rate_limit else None,
            tools=None,
        )


def proxy_clash(names: Iterable[str]) -> tuple[str, str] | None:
    """Two servers whose tools' proxied names could be the same, or None.

    `<a>__<x>` and `<b>__<y>` (a != b) can be one name only when `b` is `a` followed by `_` (`x` = `_` + `y`), or
    by `__` and more (`b` = `a__q`, `x` = `q__y`); without such a pair each proxied name has one server and one tool,
    whatever the tools are called (a tool's own `__` included)."""
    ordered = sorted(names)
    for name in ordered:
        for other in ordered:
            if other == name + "_" or other.startswith(name + PROXY_SEPARATOR):
                return name, other
    return None


def parse_servers(text: str, env: Mapping[str, str], source: str = "servers file") -> Registry:
    """Parse the text of a servers file into a registry, or raise one ConfigError saying what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source} is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ConfigError(f"{source}: expected an object with an 'mcpServers' object")
    extra = sorted(set(data) - {"mcpServers"})
    if extra:
        raise ConfigError(f"{source}: unknown top-level field {extra[0]!r}")
    clash = proxy_clash(data["mcpServers"])
    if clash is not None:
        first, second = clash
        raise ConfigError(
            f"{source}: servers {first!r} and {second!r} cannot both be configured: the MCP door names a tool "
            f"'<server>{PROXY_SEPARATOR}<tool>', and a tool of {first!r} could then have the name of a tool of "
            f"{second!r} (rename one: no server's name may be another's followed by '_' or '{PROXY_SEPARATOR}')"
        )
    return Registry({name: _parse_server(name, raw, env) for name, raw in data["mcpServers"].items()})


def load_servers(path: Path, env: Mapping[str, str] | None = None) -> Registry:
    """Read and parse the servers file at `path` (environment variables from `env`, default os.environ)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"servers file {str(path)!r} not found (set MCP_BATCH_SERVERS)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"servers file {str(path)!r} cannot be read: {exc.__class__.__name__}") from None
    return parse_servers(text, os.environ if env is None else env, source=f"servers file {str(path)!r}")
