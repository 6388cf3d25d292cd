"""The credential a session presents to its backend: a tenant's secret or token, or the service's machine token.

A session holds one `Presented`; an HTTP session's client carries it as a default header (`bind`), replaced in place
when the value changes (`update`: a refreshed token, a secret the tenant replaced), so it applies to the next request
without reopening the session and costs a request nothing extra. A stdio process gets it once, in its environment.
Tenants' HTTP sessions send through one connection pool (`SharedPool`): each request carries its own session's
header, so connections are shared and identities never are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

import httpx2
from pydantic import SecretStr

from mcp_batch.backends.servers_file import Backend, HttpTenantAuth, StdioBackend


@dataclass
class Presented:
    """One session's credential: `value` as sent, `read` the sealed value it came from (empty for a machine token),
    `checked` when it was last compared with the stored one, `expires_at` when a token expires (Unix seconds)."""

    value: SecretStr
    read: bytes = b""
    expires_at: float | None = None
    checked: float = field(default_factory=time.monotonic)
    refresh_at: float | None = None  # when a token is to be refreshed (Unix seconds), a little before it expires
    _sink: Callable[[SecretStr], None] | None = field(default=None, repr=False)

    def bind(self, http: httpx2.AsyncClient, header: str, prefix: str) -> None:
        """Carry the value in `header` of every request `http` sends, now and after each update (the one place it
        reaches the wire)."""

        def put(value: SecretStr) -> None:
            http.headers[header] = prefix + value.get_secret_value()

        put(self.value)
        self._sink = put

    def update(self, value: SecretStr, read: bytes, expires_at: float | None, refresh_at: float | None = None) -> None:
        self.value, self.read, self.expires_at, self.refresh_at = value, read, expires_at, refresh_at
        self.checked = time.monotonic()
        if self._sink is not None:
            self._sink(value)


def header_of(backend: Backend) -> tuple[str, str] | None:
    """The header and prefix an HTTP backend's credential goes in (None: a stdio backend, or static headers)."""
    auth = backend.auth
    if auth is None or isinstance(backend, StdioBackend):
        return None
    if isinstance(auth, HttpTenantAuth):
        return auth.header, auth.prefix
    return "Authorization", "Bearer "


def env_of(backend: Backend, presented: Presented | None) -> dict[str, str]:
    """The variable a stdio backend's tenant credential goes in, with its value (empty without one)."""
    if presented is None or not isinstance(backend, StdioBackend) or backend.auth is None:
        return {}
    return {backend.auth.env: presented.value.get_secret_value()}


# The idle connections the shared pool keeps. Each request's pass over the pool probes every idle connection (a
# syscall each), so after a burst of many tenants' calls the surplus idle ones are closed rather than kept for
# keep-alive: kept, they made each later call cost a tenth more.
_IDLE_KEPT = 8


class SharedPool(httpx2.AsyncHTTPTransport):
    """One connection pool lent to many sessions' clients: a client closing closes its session, not the pool. The
    pool itself is each client's transport (no wrapper), so a request through it costs what one through a client's
    own pool does."""

    def __init__(self) -> None:
        super().__init__(limits=httpx2.Limits(max_connections=100, max_keepalive_connections=_IDLE_KEPT))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None  # a session's client ends; the pool stays for the others

    async def aclose(self) -> None:
        return None

    async def close_pool(self) -> None:
        await super().aclose()
