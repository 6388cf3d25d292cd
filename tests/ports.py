"""Loopback ports for the servers the tests start, drawn below the kernel's ephemeral range.

A port found by binding port 0 comes from the ephemeral range, the same range the kernel draws every outgoing
connection's source port from. Between that probe and the server's own bind, any client in any test worker can take
the port, and the server dies with "Address already in use". No client is ever given a port below the range, so
ports there are handed out only here, and each xdist worker draws from its own slice: no two draws meet, and a port
is not handed out twice in a run, so a server restarted on its port finds it still free. Two runs on one machine (two
checkouts' suites) draw the same slices: a port is taken only under an exclusive lock on a file named for its block
of a hundred, held until the drawing process exits, so the other run passes the block by.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import tempfile
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


_LOCKS = os.path.join(tempfile.gettempdir(), "mcp-batch-test-ports")
_BLOCK = 100  # ports a lock covers: a worker draws hundreds of ports in a run, and holds a descriptor per lock
_held: dict[int, int] = {}  # block: the descriptor of its lock file, open (and locked) while this process lives


def _claim(port: int) -> bool:
    """Whether this process holds the lock of `port`'s block (taken now or before); another run holds it otherwise."""
    block = port // _BLOCK
    if block in _held:
        return True
    os.makedirs(_LOCKS, exist_ok=True)
    fd = os.open(os.path.join(_LOCKS, str(block)), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[block] = fd
    return True


def _draws(ports: range, *offsets: int) -> Iterator[int]:
    if ports.stop > _ephemeral_floor():
        raise RuntimeError(f"the ephemeral port range starts below {ports.stop}: the tests' ports would overlap it")
    for port in itertools.cycle(_slice(ports)):
        if all(_claim(port + offset) and _free(port + offset) for offset in offsets):
            yield port


_plain, _cluster = _draws(PLAIN, 0), _draws(CLUSTER, 0, BUS_OFFSET)


def free_port() -> int:
    """A loopback port nothing listens on, for a server a test starts (or for a URL where nothing must answer)."""
    return next(_plain)


def cluster_port() -> int:
    """A free port whose cluster bus port is free too."""
    return next(_cluster)
