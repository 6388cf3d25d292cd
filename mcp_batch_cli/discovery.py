"""Where a running `mcp-batch dev` is: it writes its API URL, Redis URL, servers file and pid to a small JSON file in
the user's state directory ($XDG_STATE_HOME/mcp-batch/dev.json, else ~/.local/state/mcp-batch/dev.json) and removes
it on exit. The client commands and `status` read it when no flag or variable names a server; a second `dev` finds
a live pid there and refuses to start.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from mcp_batch_cli.command_errors import CommandError

DEFAULT_SERVER_URL = "http://127.0.0.1:8000"


def state_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mcp-batch" / "dev.json"


@dataclass(frozen=True)
class DevRun:
    """What a running dev wrote."""

    pid: int
    api_url: str
    redis_url: str | None = None
    servers: str | None = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _read(path: Path) -> DevRun | None:
    try:
        fields = json.loads(path.read_text())
        return DevRun(int(fields["pid"]), str(fields["api_url"]), fields.get("redis_url"), fields.get("servers"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_dev() -> DevRun | None:
    """The dev the state file names, if its process is alive."""
    found = _read(state_file())
    return found if found is not None and _alive(found.pid) else None


def _write(path: Path, run: DevRun) -> None:
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(asdict(run)))
    os.replace(temporary, path)  # readers see the old file or the new one, never half of one


@contextlib.contextmanager
def claimed(api_url: str) -> Iterator[DevClaim]:
    """Claim the state file for this dev (ConfigError when a live dev holds it), and remove it on exit."""
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    run = DevRun(os.getpid(), api_url)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # the one winner of two devs at once
        except FileExistsError:
            other = _read(path)
            if other is not None and _alive(other.pid) and other.pid != os.getpid():
                raise CommandError(
                    f"mcp-batch dev is already running (pid {other.pid}, API at {other.api_url}); stop it first "
                    f"(if no such process is a dev, remove {path})"
                ) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # left by a dev that did not exit cleanly
            continue
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps(asdict(run)))
        break
    else:
        raise CommandError(f"could not claim {path}: another dev keeps starting")
    claim = DevClaim(path, run)
    try:
        yield claim
    finally:
        if (_read(path) or run).pid == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


class DevClaim:
    """This dev's entry in the state file; `update` adds what it learns as it starts."""

    def __init__(self, path: Path, run: DevRun) -> None:
        self.path = path
        self.run = run

    def update(self, redis_url: str, servers: str) -> None:
        self.run = DevRun(self.run.pid, self.run.api_url, redis_url, servers)
        _write(self.path, self.run)


def server_url(flag: str | None) -> tuple[str, str | None]:
    """The server a client command talks to, and where it looked when it fell back to the default (else None):
    --server-url, then $MCP_BATCH_SERVER_URL, then a running dev, then the default."""
    if flag:
        return flag, None
    if os.environ.get("MCP_BATCH_SERVER_URL"):
        return os.environ["MCP_BATCH_SERVER_URL"], None
    dev = running_dev()
    if dev is not None:
        return dev.api_url, None
    return DEFAULT_SERVER_URL, looked_where()


def looked_where() -> str:
    return (
        f"no --server-url, no $MCP_BATCH_SERVER_URL, and no running `mcp-batch dev` in {state_file()}; "
        f"tried the default {DEFAULT_SERVER_URL}"
    )
