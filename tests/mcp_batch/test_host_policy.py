"""The Host and Origin policy, pure: which headers name a host the service serves, and which origins may call it."""

from __future__ import annotations

import pytest

from mcp_batch.host_policy import HostPolicy, authority, host_entry, origin_entry

DEFAULT = HostPolicy()


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("localhost", ("localhost", None)),
        ("LocalHost.:8000", ("localhost", 8000)),
        ("[::1]:80", ("::1", 80)),
        ("[::1]", ("::1", None)),
        ("10.1.2.3:9", ("10.1.2.3", 9)),
        ("::1", None),  # IPv6 only in brackets
        ("a:b:c", None),
        ("host:99999", None),
        ("host:port", None),
        ("user@host", None),
        ("host/path", None),
        ("", None),
        ("[not-an-address]", None),
    ],
)
def test_a_host_header_is_read_as_host_and_port_or_refused(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert authority(value) == parsed


def test_loopback_names_and_the_arrival_address_are_served_on_any_port_and_nothing_else() -> None:
    for host in ("localhost", "localhost:1", "127.0.0.1:8000", "127.1.2.3", "[::1]:8000", None):
        assert DEFAULT.host_allowed(host, "127.0.0.1"), host
    assert DEFAULT.host_allowed("192.168.1.5:8000", "192.168.1.5")  # bound to 0.0.0.0, reached on the LAN
    assert DEFAULT.host_allowed("[fd00::5]:8000", "fd00::5")
    for host in ("evil.example", "evil.example:8000", "192.168.1.6", "localhost.evil.example", "127.0.0.1.nip.io"):
        assert not DEFAULT.host_allowed(host, "192.168.1.5"), host


def test_the_name_the_api_listens_under_is_served() -> None:
    assert HostPolicy(served_name="box.local").host_allowed("box.local:8000", "10.0.0.2")
    assert not HostPolicy(served_name="box.local").host_allowed("other.local:8000", "10.0.0.2")


def test_the_own_origin_is_the_host_and_port_of_the_host_header_whatever_the_scheme() -> None:
    assert DEFAULT.origin_allowed("http://127.0.0.1:8000", "127.0.0.1:8000")
    assert DEFAULT.origin_allowed("https://batches.example.com", "batches.example.com")  # TLS ended at a proxy
    assert DEFAULT.origin_allowed("http://batches.example.com", "batches.example.com:80")
    for origin in ("http://127.0.0.1:8001", "http://localhost:8000", "null", "file://", "http://127.0.0.1:8000/x"):
        assert not DEFAULT.origin_allowed(origin, "127.0.0.1:8000"), origin
    assert not DEFAULT.origin_allowed("http://127.0.0.1:8000", None)


def test_listed_origins_and_star_are_served() -> None:
    listed = HostPolicy(origins=("https://app.example.com", "http://localhost:5173"))
    assert listed.origin_allowed("https://app.example.com", "api.example.com")
    assert listed.origin_allowed("https://app.example.com:443", "api.example.com")
    assert not listed.origin_allowed("http://app.example.com", "api.example.com")
    assert HostPolicy(origins=("*",)).origin_allowed("null", "api.example.com")


@pytest.mark.parametrize("entry", ["batches.example.com", "batches.example.com:8443", "*.example.com", "*", "[::1]"])
def test_host_entries_that_name_hosts_are_taken(entry: str) -> None:
    assert host_entry(entry) == entry


@pytest.mark.parametrize("entry", ["https://x.example", "x.example/", "*.x.example:80", "a:b:c", "", "*x.example"])
def test_host_entries_that_name_no_host_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed_hosts"):
        host_entry(entry)


@pytest.mark.parametrize("entry", ["x.example", "https://x.example/", "ftp://x.example", "null", "https://"])
def test_origin_entries_that_are_no_origin_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed_origins"):
        origin_entry(entry)
