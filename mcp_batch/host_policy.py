"""Which `Host` and `Origin` headers the API serves: the defence against DNS rebinding (pure functions).

A web page on `http://evil.example` can have its name rebound to 127.0.0.1 and then send requests to a service bound
to loopback; the browser still names `evil.example` in `Host` and `http://evil.example` in `Origin`. So a request is
served only when its Host is one the service serves under:

- a loopback name or address (`localhost`, `127.0.0.1` and the rest of 127/8, `[::1]`), on any port;
- the address the request arrived at (the API's own address: a name can be rebound, an address cannot);
- the name the API was started with (`mcp-batch api --host NAME`), on any port;
- an entry of MCP_BATCH_ALLOWED_HOSTS: `name` (any port), `name:port`, `*.suffix` (names below it), `*` (any host:
  for a proxy in front that checks Host itself).

A request without Host (HTTP/1.0) is served: browsers always send one. A browser's `Origin` must then be the
service's own (its host and port those of the Host header, whatever its scheme, since TLS may end at a proxy) or an
entry of MCP_BATCH_ALLOWED_ORIGINS (`scheme://host[:port]`, or `*`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
ANY = "*"
_NAME = re.compile(r"[a-z0-9_.-]+")  # what a host name or IPv4 address is made of (urlsplit gave it in lower case)


def authority(value: str) -> tuple[str, int | None] | None:
    """The host (lower case, IPv6 without brackets, no trailing dot) and port of a Host header; None when it is not
    one."""
    if not value or any(c in value for c in "/?#@\\ \t"):
        return None
    try:
        parts = urlsplit("//" + value)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    if ":" in host:  # an IPv6 address: only in brackets, as a Host header writes it
        if not value.startswith("[") or not _is_address(host):
            return None
    elif value.count(":") > 1 or not _NAME.fullmatch(host):
        return None
    return host.rstrip("."), port


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_entry(entry: str) -> str:
    """An entry of MCP_BATCH_ALLOWED_HOSTS as given, or ValueError saying what is wrong with it."""
    if entry == ANY:
        return entry
    name = entry[2:] if entry.startswith("*.") else entry
    if authority(name) is None or (entry.startswith("*.") and ":" in name):
        raise ValueError(
            f"allowed_hosts entry {entry!r} is not a host name (`batches.example.com`, `batches.example.com:8443`, "
            "`*.example.com` or `*`: no scheme, no path)"
        )
    return entry


def _origin(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an Origin header; None when it is not a web origin (`null`, another scheme)."""
    try:
        parts = urlsplit(value)
        scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not host or parts.path or parts.query or parts.fragment or "@" in value:
        return None
    return scheme, host.rstrip("."), port or _DEFAULT_PORTS[scheme]


def origin_entry(entry: str) -> str:
    """An entry of MCP_BATCH_ALLOWED_ORIGINS as given, or ValueError saying what is wrong with it."""
    if entry != ANY and _origin(entry) is None:
        raise ValueError(
            f"allowed_origins entry {entry!r} is not an origin (`https://app.example.com`, with an http or https "
            "scheme and a port if not the default; no path), nor `*`"
        )
    return entry


@dataclass(frozen=True)
class HostPolicy:
    """The hosts and origins served, from the settings (entries already checked) and the name the API was started
    with."""

    hosts: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    served_name: str | None = None

    def host_allowed(self, host_header: str | None, arrived_at: str | None) -> bool:
        """Whether a request naming `host_header` (None: none given), which arrived at the address `arrived_at`,
        is one this service serves."""
        if host_header is None or ANY in self.hosts:
            return True
        parsed = authority(host_header)
        if parsed is None:
            return False
        host, port = parsed
        if _is_loopback(host) or host == (arrived_at or "").lower() or host == self.served_name:
            return True
        return any(_matches(entry, host, port) for entry in self.hosts)

    def origin_allowed(self, origin: str, host_header: str | None) -> bool:
        """Whether a browser's request from `origin` to the host named `host_header` is served."""
        if ANY in self.origins:
            return True
        parsed = _origin(origin)
        if parsed is None:
            return False
        scheme, host, port = parsed
        own = authority(host_header) if host_header is not None else None
        if own is not None and own[0] == host and (own[1] or _DEFAULT_PORTS[scheme]) == port:
            return True
        return any(_origin(entry) == parsed for entry in self.origins)


def _matches(entry: str, host: str, port: int | None) -> bool:
    if entry.startswith("*."):
        return host.endswith(entry[1:].lower().rstrip("."))
    parsed = authority(entry)
    assert parsed is not None  # the settings checked every entry
    return parsed[0] == host and (parsed[1] is None or parsed[1] == port)
