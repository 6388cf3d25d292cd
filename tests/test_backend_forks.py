"""The backends' fork server (tests/backend_forks.py): a forked backend is a process of its own, and it ends with
its launcher, whether the launcher is stopped by a signal it passes on or killed outright."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support import FORKS_ENV, HttpBackendProcess, call_backend, eventually, ready, spawn_http_backend


async def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
async def test_a_forked_backend_is_its_own_process_and_ends_with_its_launcher(stop: signal.Signals) -> None:
    assert os.environ.get(FORKS_ENV)  # the conftest's fork server runs
    backend: HttpBackendProcess = ready(spawn_http_backend())
    try:
        pid = (await call_backend(backend.url, "stats"))["pid"]
        assert pid not in (backend.process.pid, os.getpid())
        backend.process.send_signal(stop)
        backend.process.wait(10)
        await eventually(lambda: _gone(pid), what="the forked backend ended", timeout=10)
    finally:
        backend.stop()
