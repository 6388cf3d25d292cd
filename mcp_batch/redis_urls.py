"""Redis URLs taken apart by hand, for the forms `urllib.parse` refuses.

A Sentinel or Cluster URL lists several hosts in its network location (`a:1,[::1]:2`). Python's `urlsplit` refuses
text before a `[` that is not part of a bracketed host ("Invalid IPv6 URL", a check current CPython releases and
distributions' security fixes carry), so these URLs are split here instead, and never echoed: they may hold a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote


@dataclass(frozen=True)
class UrlParts:
    """A URL's scheme (lower case), credentials (unquoted), host list as written, and path."""

    scheme: str
    username: str | None
    password: str | None
    hosts: str
    path: str


def split(url: str) -> UrlParts:
    scheme, _, rest = url.partition("://")
    rest = rest.partition("?")[0].partition("#")[0]
    netloc, slash, path = rest.partition("/")
    credentials, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, _, secret = credentials.partition(":")
        username, password = unquote(user) or None, unquote(secret) or None
    return UrlParts(scheme.lower(), username, password, hosts, slash + path)


def scheme_of(url: str) -> str:
    return url.partition("://")[0].lower()


def database_of(url: str) -> int:
    """The database a standalone or Sentinel URL names (its last path segment, or `?db=`), else 0."""
    query = dict(pair.partition("=")[::2] for pair in url.partition("?")[2].partition("#")[0].split("&") if pair)
    if query.get("db", "").isdigit():
        return int(query["db"])
    if scheme_of(url) == "unix":
        return 0
    segments = [segment for segment in split(url).path.split("/") if segment]
    return int(segments[-1]) if segments and segments[-1].isdigit() else 0
