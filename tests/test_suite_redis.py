"""The suite's own Redis (tests/suite_redis.py): on a machine with no Redis it starts one, a Redis named but not there
stops the run at once with one message, and two runs on one machine never share the default's databases."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests import suite_redis
from tests.ports import free_port

ROOT = Path(__file__).parents[1]
THIS = "tests/test_suite_redis.py::test_each_test_gets_an_empty_database_that_answers"

pytestmark = pytest.mark.timeout(120)


async def test_each_test_gets_an_empty_database_that_answers(redis: aioredis.Redis) -> None:
    assert await redis.dbsize() == 0
    await redis.set("left", "behind")  # the next test's database is emptied before it runs


def _pytest(*args: str, env: dict[str, str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    # A run of its own: not this xdist worker's (its name would pick this worker's database in the Redis chosen).
    env = {name: value for name, value in env.items() if not name.startswith("PYTEST_XDIST_")}
    argv = [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=100, check=False)


def test_a_redis_named_but_not_there_stops_the_run_at_once_naming_it() -> None:
    url = f"redis://127.0.0.1:{free_port()}/15"
    done = _pytest(THIS, env={**os.environ, "MCP_BATCH_TEST_REDIS_URL": url})
    output = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert output.count("no Redis answers there") == 1 and url in output
    assert "Traceback" not in output and "ConnectionError" not in output


@pytest.mark.slow
def test_on_a_machine_with_no_redis_the_suite_starts_the_embedded_valkey(tmp_path: Path) -> None:
    """A network namespace of its own (nothing listens on 6379 there) and a PATH without redis-server."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-n", "true"], capture_output=True, check=False).returncode:
        pytest.skip("needs unshare -n (root, or user namespaces) for a network with nothing on it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for tool in Path(folder).glob("*") if Path(folder).is_dir() else ():
            if not tool.name.startswith("redis-") and not (bin_dir / tool.name).exists():
                (bin_dir / tool.name).symlink_to(tool)
    env = {**os.environ, "PATH": str(bin_dir)}
    env.pop("MCP_BATCH_TEST_REDIS_URL", None)
    # loopback starts down in a new network namespace: bring it up, then run the suite's own command there
    script = 'ip link set lo up 2>/dev/null || true; exec "$@"'
    done = _pytest(THIS, "-v", env=env, prefix=(unshare, "-n", "sh", "-c", script, "sh"))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "redis: valkey-server (embedded) on port" in output and "1 passed" in output


def test_a_run_beside_another_on_the_default_starts_a_server_of_its_own() -> None:
    """The default's lock is held (by this run's controller when it took the default, else here), so a second run
    choosing now gets a private server, saying why; the first keeps its databases to itself."""
    held = suite_redis.claim(suite_redis.DEFAULT_URL)  # None: this run's controller holds it already
    chosen = suite_redis.choose({})
    try:
        assert chosen.server is not None and chosen.url != suite_redis.DEFAULT_URL
        assert chosen.description.endswith(
            f"another run on this machine is using {suite_redis.DEFAULT_URL}"
            if suite_redis.answers(suite_redis.DEFAULT_URL)
            else f"nothing answered at {suite_redis.DEFAULT_URL}"
        )
        assert suite_redis.answers(chosen.url)
    finally:
        chosen.stop()
        if held is not None:
            os.close(held)
    if held is not None:  # released: the next run takes the default again
        again = suite_redis.claim(suite_redis.DEFAULT_URL)
        assert again is not None
        os.close(again)
