"""Webhook URLs and allow-list entries, parsed: what the settings check at start-up and a batch's webhook is held to.

Scheme, host and port are compared exactly once both are parsed (so neither `https://hooks.example.com.evil.io/` nor
`https://hooks.example.com@evil/` falls under `https://hooks.example.com/`). A URL with credentials (`user@`), a dot
segment, a backslash, whitespace, a control or a non-ASCII character is refused whatever the list says. Messages
never repeat the URL: it may carry a token.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

MAX_URL_LENGTH = 2_000
_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Target:
    """A parsed webhook URL, or an allow-list entry: what is compared."""

    scheme: str
    host: str
    port: int
    path: str

    def covers(self, url: Target) -> bool:
        """This allow-list entry admits `url`: same scheme, host and port; its path under this one's."""
        if (self.scheme, self.host, self.port) != (url.scheme, url.host, url.port):
            return False
        if self.path.endswith("/"):
            return url.path.startswith(self.path)
        return url.path == self.path or url.path.startswith(self.path + "/")


def _split(url: str) -> tuple[Target, SplitResult]:
    """Parse an absolute http(s) URL; ValueError's message says what is wrong without repeating it."""
    if len(url) > MAX_URL_LENGTH:
        raise ValueError(f"at most {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(c <= " " or c in "\x7f\\" for c in url):
        raise ValueError("must be ASCII without whitespace, control characters or backslashes (percent-encode them)")
    parts = urlsplit(url)
    if parts.scheme not in _PORTS:
        raise ValueError("must be an https:// URL")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials (user@host)")
    if not parts.hostname:
        raise ValueError("must name a host")
    if {".", ".."} & set(unquote(parts.path).split("/")):
        raise ValueError("must not contain dot segments (/./ or /../)")
    return Target(parts.scheme, parts.hostname, port or _PORTS[parts.scheme], parts.path or "/"), parts


def parse(url: str) -> Target:
    """A webhook URL, parsed (ValueError says why it cannot be used)."""
    return _split(url)[0]


def allow_entry(entry: str) -> Target:
    """An allow-list entry, parsed; ValueError (naming the entry: it is configuration, not a caller's URL)."""
    try:
        target, parts = _split(entry)
    except ValueError as exc:
        raise ValueError(f"webhook_allow entry {entry!r}: {exc}") from None
    if parts.query or parts.fragment:
        raise ValueError(f"webhook_allow entry {entry!r}: a prefix has no query or fragment")
    return target
