"""The Redis the whole run uses, chosen once by the process that runs pytest (xdist's controller, or the only one).

- `MCP_BATCH_TEST_REDIS_URL` set: that Redis; if it does not answer, the run stops at once, naming it.
- Not set: the default (`redis://127.0.0.1:6379/15`) when a Redis answers there and no other run on this machine is
  using it (a lock held for the run: two runs on one database would empty each other's); else a private server for
  this run (`redis-server` from the PATH, else the embedded `valkey-server`: mcp_batch_cli/private_redis.py) on a free
  loopback port, stopped when the run ends.

The choice reaches xdist's workers through `MCP_BATCH_TEST_REDIS_URL` in the environment they inherit; each takes a
database of its own from it (tests/conftest.py), and the service's channels carry the database (mcp_batch/keys.py), so
no worker hears another's messages.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from mcp_batch_cli import private_redis
from mcp_batch_cli.status import redacted

URL_ENV = "MCP_BATCH_TEST_REDIS_URL"
DEFAULT_URL = "redis://127.0.0.1:6379/15"


@dataclass
class SuiteRedis:
    url: str
    description: str
    server: private_redis.PrivateRedis | None = None
    workdir: Path | None = None
    claim: int | None = None  # the lock on the default's databases, held for the run

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.claim is not None:
            os.close(self.claim)  # the lock goes with it (and with the process, however it ends)


def claim(url: str) -> int | None:
    """An exclusive lock on the Redis at `url` for this run: its file descriptor, or None when another run on this
    machine holds it."""
    folder = Path(tempfile.gettempdir()) / "mcp-batch-test-redis"
    folder.mkdir(exist_ok=True)
    name = urllib.parse.urlsplit(url).netloc.replace(":", "-")
    fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def choose(environ: dict[str, str]) -> SuiteRedis:
    """The run's Redis (a private one started); pytest.UsageError when the one named does not answer."""
    named = environ.get(URL_ENV)
    if named:
        if not answers(named):
            raise pytest.UsageError(
                f"{URL_ENV} names {redacted(named)}, and no Redis answers there: start it, or unset {URL_ENV} "
                "and the suite starts a server of its own"
            )
        return SuiteRedis(named, f"{redacted(named)} ({URL_ENV})")
    if not answers(DEFAULT_URL):
        why = f"nothing answered at {DEFAULT_URL}"
    elif (held := claim(DEFAULT_URL)) is not None:
        return SuiteRedis(DEFAULT_URL, f"{DEFAULT_URL} (the default; {URL_ENV} names another)", claim=held)
    else:
        why = f"another run on this machine is using {DEFAULT_URL}"
    binary = private_redis.find_server()
    if binary is None:
        raise pytest.UsageError(f"{why}, and {private_redis.MISSING}")
    workdir = Path(tempfile.mkdtemp(prefix="mcpb-suite-redis-"))
    server = private_redis.PrivateRedis(binary, workdir)
    server.wait_ready()
    url = f"redis://127.0.0.1:{server.port}/15"
    return SuiteRedis(url, f"{server.describe()}: {why}", server, workdir)
