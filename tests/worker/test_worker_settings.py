"""arq's settings class for `arq worker.main.WorkerSettings`: what create_worker gives arq, made from the settings
only when arq asks for it."""

from __future__ import annotations

import os
import subprocess
import sys

from arq.worker import get_kwargs

from mcp_batch.settings import Settings
from tests.conftest import REDIS_URL
from worker.main import arq_options, create_worker


async def test_arqs_settings_class_carries_what_the_worker_is_given() -> None:
    import worker.main

    given = get_kwargs(worker.main.WorkerSettings)
    assert {"functions", "on_startup", "on_shutdown", "queue_name", "redis_settings", "max_jobs"} <= set(given)
    [job] = given["functions"]
    assert job.name == "run_batch" and job.max_tries == 1
    settings = Settings(redis_url=REDIS_URL, auth="none", worker_max_jobs=7)
    options = arq_options(settings)
    assert options["max_jobs"] == 7 and options["ctx"]["settings"] is settings
    worker = create_worker(settings, handle_signals=False)
    assert worker.queue_name == options["queue_name"] and set(worker.functions) == {"run_batch"}


_READ_LATE = """
import worker.main
try:
    worker.main.WorkerSettings
except Exception as exc:
    print(type(exc).__name__)
"""


def test_importing_the_worker_reads_no_settings() -> None:
    env = {**os.environ, "MCP_BATCH_LEASE_SECONDS": "not a number"}
    argv = [sys.executable, "-c", _READ_LATE]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-500:]  # the import itself did not fail
    assert done.stdout.strip() == "ValidationError"  # the settings are read, and refused, when arq asks for them
