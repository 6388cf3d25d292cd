"""The servers file (`mcpServers` JSON): parse, validate, interpolate `${VAR}`; the backend registry.

A bad file stops start-up with one message naming the server and the field; there is no half-configured start. Two
servers whose tools the MCP door's proxy could give the same name (`evil` and `evil__a`) stop it too.
Header and env values are held as secrets so they never reach a repr, a log line or a response.

A server's `auth` says whose credential its calls carry: none (the static `headers`/`env`, the operator's, for every
tenant), `tenant` (each tenant's own secret, in a header or a stdio process's env), `oauth` (each tenant's token from
the authorization-code flow) or `oauth_client_credentials` (the service's own machine token, one for all tenants).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

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


class HttpTenantAuth(BaseModel):
    """Each tenant's own secret for this server, sent in one header (`prefix` + secret)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tenant"]
    header: str = Field("Authorization", pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
    prefix: str = Field("Bearer ", max_length=100)


class StdioTenantAuth(BaseModel):
    """Each tenant's own secret for this server, in one variable of a process started for that tenant."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tenant"]
    env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")


class OAuthAuth(BaseModel):
    """An OAuth-protected MCP server: each tenant connects once through the authorization-code flow."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["oauth"]
    scopes: list[str] = Field(default_factory=list)
    client_id: str | None = Field(None, min_length=1, description="A pre-registered client, when there is one.")
    client_secret: SecretStr | None = None
    client_metadata_url: str | None = Field(None, pattern=r"^https://", description="A Client ID Metadata Document.")


class ClientCredentialsAuth(BaseModel):
    """The service's own machine identity: one token for every tenant (OAuth client credentials grant)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["oauth_client_credentials"]
    token_url: str = Field(pattern=r"^https?://")
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    scopes: list[str] = Field(default_factory=list)
    audience: str | None = None


HttpAuth = Annotated[HttpTenantAuth | OAuthAuth | ClientCredentialsAuth, Field(discriminator="type")]


class _BackendBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float | None = Field(None, gt=0)
    max_concurrency: int | None = Field(None, ge=1)
    rate_limit: RateLimit | None = None
    rate_limit_per_tenant: RateLimit | None = Field(
        None,
        description="Each tenant's own allowance on this backend, within `rate_limit`.",
    )
    read_only_tools: list[str] = Field(default_factory=list, description="Tools to treat as read-only.")
    deny_tools: list[str] = Field(default_factory=list, description="Tools never dispatched.")


class StdioBackend(_BackendBase):
    """A backend started as a child process, spoken to over stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, SecretStr] = Field(default_factory=dict)
    cwd: str | None = None
    auth: StdioTenantAuth | None = None


class HttpBackend(_BackendBase):
    """A backend reached over streamable HTTP."""

    type: Literal["http"] = "http"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    auth: HttpAuth | None = None


Backend = StdioBackend | HttpBackend


def per_tenant(backend: Backend) -> bool:
    """Whether calls to `backend` carry the calling tenant's own credential (`tenant` or `oauth` auth)."""
    return backend.auth is not None and backend.auth.type in ("tenant", "oauth")


def connect_route(server: str, backend: Backend) -> str:
    """The route a tenant calls to give its credential for `server` (`details.connect` of an unauthenticated item)."""
    if backend.auth is not None and backend.auth.type == "oauth":
        return f"POST /v1/credentials/{server}/connect"
    return f"PUT /v1/credentials/{server}"


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
        backend = model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        loc = [str(p) for p in first["loc"]]
        if loc[:1] == ["auth"] and len(loc) > 2:
            del loc[1]  # the union's tag (`auth.tenant.header`): the file says `auth.header`
        field = ".".join(loc)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where}, field {field!r}: {first['msg']}{more}") from None
    clash = _auth_clash(backend)
    if clash is not None:
        raise ConfigError(f"{where}, field {clash!r}: also set statically; a credential comes from one place")
    return backend


def _auth_clash(backend: Backend) -> str | None:
    """The `auth` field that names a header or variable the static `headers`/`env` also set, or None."""
    if isinstance(backend, StdioBackend):
        return "auth.env" if backend.auth is not None and backend.auth.env in backend.env else None
    if backend.auth is None:
        return None
    header = backend.auth.header if isinstance(backend.auth, HttpTenantAuth) else "Authorization"
    return "auth.header" if header.lower() in {h.lower() for h in backend.headers} else None


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

    def __getitem__(self, name: str) -> Backend:
        return self._backends[name]

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
            auth=b.auth.type if b.auth is not None else None,
            tools=None,
        )


def require_secrets_key(registry: Registry, configured: bool) -> None:
    """A ConfigError when a backend takes tenants' credentials and there is no key to seal them with."""
    needing = [name for name in registry.names if per_tenant(registry[name])]
    if needing and not configured:
        raise ConfigError(
            f"server {needing[0]!r}, field 'auth': tenants' credentials are sealed, and MCP_BATCH_SECRETS_KEYS is not "
            "set (make a key with `mcp-batch credentials new-key`)"
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
