"""A fork server for the tests' own backend (tests/fault_backend.py), as multiprocessing's forkserver is for its
workers: one process per test worker imports the backend once, and each backend a test starts is forked from it.
The tests' runs of the `mcp-batch` command are forked from it too (the launcher's `--mcp-batch`): the same `main` the
console script calls, in a process of its own with the launcher's pipes, environment and working directory.

Importing the MCP SDK costs a Python process a second or more of CPU (pydantic building the protocol's models), and
the suite starts a backend process for most of its tests. A forked backend is the same real server in a real process
of its own, over the pipes or the port it was started with: its launcher (tests/forked_backend.py, the process the
worker or the test starts) hands its stdin, stdout and stderr to the fork server with its arguments, environment and
working directory, passes on SIGTERM, SIGINT and SIGHUP, and exits with the backend's exit code. A launcher that
dies (a SIGKILL, or a process group killed around it) takes its backend with it: the fork server kills a backend
whose launcher hung up.

    python -m tests.backend_forks SOCKET    (serves until its stdin closes: the test worker that started it ended)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import selectors
import signal
import socket
import sys
import traceback

HEADER_BYTES = 1 << 20  # one launcher's arguments, environment and working directory, in one datagram


def _run_backend(fds: list[int], header: dict[str, object]) -> int:
    """In the forked child: become the backend (or the `mcp-batch` command) the launcher asked for; its exit code."""
    from mcp_batch_cli import commands
    from tests import fault_backend

    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(dict(header["env"]))  # type: ignore[call-overload]
    os.chdir(str(header["cwd"]))
    argv = [str(arg) for arg in header["argv"]]  # type: ignore[attr-defined]
    command = header.get("kind") == "mcp-batch"
    sys.argv = ["mcp-batch" if command else "fault_backend", *argv]
    random.seed()  # not the fork server's state, shared by every child
    try:
        commands.main(argv) if command else fault_backend.main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


class ForkServer:
    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        self.listener.listen(64)
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # backend pid -> its launcher's connection
        self.woken_r, self.woken_w = os.pipe()
        os.set_blocking(self.woken_w, False)
        signal.set_wakeup_fd(self.woken_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd says a child ended

    def serve(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.woken_r, selectors.EVENT_READ, "reap")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "stop")
        while True:
            for key, _ in self.selector.select():
                if key.data == "accept":
                    self._accept()
                elif key.data == "reap":
                    os.read(self.woken_r, 4096)
                    self._reap()
                elif key.data == "stop":
                    if not os.read(0, 4096):
                        self._stop()
                        return
                else:
                    self._hung_up(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        data, fds, _, _ = socket.recv_fds(conn, HEADER_BYTES, 3)
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        header = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for other in (self.listener, conn, *self.children.values()):
                    other.close()
                self.selector.close()
                os.close(self.woken_r)
                os.close(self.woken_w)
                code = _run_backend(fds, header)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"pid {pid}".encode())
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(KeyError):  # unregistered already if its launcher hung up first
                    self.selector.unregister(conn)
                with contextlib.suppress(OSError):  # its launcher may be gone already
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}".encode())
                conn.close()

    def _hung_up(self, conn: socket.socket, pid: int) -> None:
        # A launcher says nothing after its header: its connection turns readable only when it closes.
        self.selector.unregister(conn)
        with contextlib.suppress(ProcessLookupError):  # its launcher died: so does its backend (reaped on SIGCHLD)
            os.kill(pid, signal.SIGKILL)

    def _stop(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def main() -> None:
    import mcp_batch.client.sync_client  # noqa: F401 - and the command's, whose verbs import their client late
    import mcp_batch_cli.commands  # noqa: F401
    import tests.fault_backend  # noqa: F401 - the slow import, once, before any fork

    ForkServer(sys.argv[1]).serve()


if __name__ == "__main__":
    main()
