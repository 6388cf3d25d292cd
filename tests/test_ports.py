"""The tests' ports (tests/ports.py): a port one run holds is never handed to another run on the same machine."""

from __future__ import annotations

import subprocess
import sys

from tests import ports


def test_a_port_block_another_run_holds_is_passed_by() -> None:
    # Another run, as the same xdist worker as this one: it draws from the same slice, and holds what it drew.
    other = subprocess.Popen(
        [sys.executable, "-c", "from tests.ports import free_port; print(free_port(), flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None
        held = int(other.stdout.readline())
        drawn = [ports.free_port() for _ in range(300)]
        assert all(port // 100 != held // 100 for port in drawn)
    finally:
        other.communicate("\n", timeout=10)
