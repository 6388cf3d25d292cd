"""Why a backend failed, in words: exception groups unwrapped to their root cause, named as a person would.

`command not found: mcp-server-x`, `connection refused at 127.0.0.1:9`, `the backend answered HTTP 401 while listing
tools`, `the stdio server exited with code 1 (last stderr line: …)`. A message names the command (never its
arguments), the host and port (never the URL's path, query or credentials), and never a header or env value: a
stderr line has every configured env value masked.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from mcp_batch.backends.servers_file import Backend, HttpBackend, StdioBackend


def causes(exc: BaseException) -> Iterator[BaseException]:
    """Every exception inside `exc`: the members of exception groups, then what each was raised from, depth first."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
            continue
        yield current
        following = current.__cause__ or current.__context__
        if following is not None:
            stack.append(following)


def where(backend: HttpBackend) -> str:
    """`host:port` of an HTTP backend (nothing else of its URL)."""
    parts = urlsplit(backend.url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def mask(line: str, backend: Backend) -> str:
    """`line` with every configured env or header value replaced by `***`."""
    values = backend.env.values() if isinstance(backend, StdioBackend) else backend.headers.values()
    for secret in values:
        value = secret.get_secret_value()
        if len(value) >= 3:
            line = line.replace(value, "***")
    return line


def describe(
    exc: BaseException,
    backend: Backend,
    phase: str,
    status: int | None = None,
    exit_code: int | None = None,
    last_line: str | None = None,
) -> str:
    """The root cause of a backend's failure while `phase` (e.g. "listing tools"), in words."""
    if status is not None:
        return f"the backend answered HTTP {status} while {phase}"
    if exit_code is not None:
        stderr = f" (last stderr line: {mask(last_line, backend)})" if last_line else ""
        return f"the stdio server exited with code {exit_code} while {phase}{stderr}"
    found = list(causes(exc))
    for cause in found:  # the specific causes first, wherever they are in the chain
        said = _specific(cause, backend)
        if said is not None:
            return said
    for cause in found:
        if isinstance(backend, HttpBackend) and isinstance(cause, OSError):
            return f"could not connect to {where(backend)}: {type(cause).__name__}"
        if isinstance(cause, MCPError) and cause.error.code == CONNECTION_CLOSED:
            return f"the server closed the connection while {phase}"
    root = found[-1] if found else exc
    return f"{type(root).__name__} while {phase}"


def _specific(cause: BaseException, backend: Backend) -> str | None:
    if isinstance(backend, StdioBackend):
        if isinstance(cause, FileNotFoundError):
            return f"command not found: {backend.command}"
        if isinstance(cause, PermissionError):
            return f"command not executable: {backend.command}"
        if isinstance(cause, NotADirectoryError):
            return f"the working directory of {backend.command} does not exist"
        return None
    if isinstance(cause, ConnectionRefusedError):
        return f"connection refused at {where(backend)}"
    if isinstance(cause, socket.gaierror):
        return f"could not resolve the host of {where(backend)}"
    if isinstance(cause, ssl.SSLError):
        return f"the TLS handshake with {where(backend)} failed"
    if isinstance(cause, TimeoutError):
        return f"timed out connecting to {where(backend)}"
    return None
