"""Loopback ports for the servers the tests start, drawn below the kernel's ephemeral range.

A port found by binding port 0 comes from the ephemeral range, the same range the kernel draws every outgoing
connection's source port from. Between that probe and the server's own bind, any client in any test worker can take
the port, and the server dies with "Address already in use". No client is ever given a port below the range, so
ports there are handed out only here, and each xdist worker draws from its own slice: no two draws meet, and a port
is not handed out twice in a run, so a server restarted on its port finds it still free.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator

BUS_OFFSET = 10_000  # a cluster node also listens on its port plus this, its cluster bus
# Plain ports, and cluster ports whose bus ports (18,000 to 20,000) fall between the two ranges.
PLAIN = range(20_000, 32_000)
CLUSTER = range(8_000, 10_000)


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as limits:
            return int(limits.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _slice(ports: range) -> range:
    """This test worker's share of `ports`: xdist names its workers gw0, gw1, ... and says how many there are."""
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    # A worker xdist starts in place of a crashed one gets the next name: it takes over a slice, never one past them.
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % count
    size = len(ports) // count
    return range(ports.start + index * size, ports.start + (index + 1) * size)


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:  # a process outside the tests holds it
            return False
        return True


def _draws(ports: range, *offsets: int) -> Iterator[int]:
    if ports.stop > _ephemeral_floor():
        raise RuntimeError(f"the ephemeral port range starts below {ports.stop}: the tests' ports would overlap it")
    for port in itertools.cycle(_slice(ports)):
        if all(_free(port + offset) for offset in offsets):
            yield port


_plain, _cluster = _draws(PLAIN, 0), _draws(CLUSTER, 0, BUS_OFFSET)


def free_port() -> int:
    """A loopback port nothing listens on, for a server a test starts (or for a URL where nothing must answer)."""
    return next(_plain)


def cluster_port() -> int:
    """A free port whose cluster bus port is free too."""
    return next(_cluster)
