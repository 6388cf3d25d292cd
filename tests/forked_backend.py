"""The launcher of a forked test backend (tests/backend_forks.py): the process a worker or a test starts, standing
for the backend the fork server forks for it. Standard library only, so it starts in a few tens of milliseconds.

    python -m tests.forked_backend SOCKET [fault_backend's arguments...]
    python -m tests.forked_backend SOCKET --mcp-batch [the command's arguments...]
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys


def main() -> None:
    path, argv = sys.argv[1], sys.argv[2:]
    kind = "mcp-batch" if argv[:1] == ["--mcp-batch"] else "backend"
    argv = argv[1:] if kind == "mcp-batch" else argv
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.connect(path)
    header = json.dumps({"kind": kind, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(server, [header], [0, 1, 2])
    # The backend's pipes are the backend's alone: its stdout closes when it exits, not when this process does.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    said = server.recv(64).split()
    if len(said) != 2 or said[0] != b"pid":
        os._exit(1)
    pid = int(said[1])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    said = server.recv(64).split()  # `exit N` once the backend ends; nothing if the fork server is gone
    code = int(said[1]) if len(said) == 2 and said[0] == b"exit" else 1
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
