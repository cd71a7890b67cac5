"""A launcher that imports the driver once and forks one driver instance per request.

Starting the driver as a new interpreter costs about a second of CPU, nearly all of it importing the Kubernetes
client; checks that start dozens of private instances pay it each time. The launcher pays it once: it imports
everything the driver needs, then waits on a Unix socket. Each connection asks for one instance with one JSON line
`{"argv": [...], "log": "<path>", "env": {...}}` (the driver's own options, without the interpreter and module;
`env`, optional, is added to the launcher's environment); the launcher forks, the child runs the driver's `main`
with stdout and stderr going to the log, and the launcher answers
`{"pid": N}` and, once that child has exited, `{"exit": code}` (negative: killed by that signal, as `subprocess`
reports it) before closing the connection. The caller signals the child by its pid.

Nothing outlives its owner: the launcher gets SIGKILL when the process that started it dies (its starter asks the
kernel for that, as `DriverLauncher` does), and every child gets SIGKILL when the launcher dies. The launcher
creates no thread and no gRPC or API object before it forks, so each child starts from a clean state.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from dra_wire.kubelet_api import load
from fake_dra.__main__ import main as driver_main

PR_SET_PDEATHSIG = 1
# A request is one short JSON line; anything longer is not ours.
MAX_REQUEST = 64 * 1024


def _die_with_parent(parent: int) -> None:
    """SIGKILL once `parent` dies; the kernel signals only deaths after the request, so check for one before it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def _read_request(connection: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(4096)
        if not chunk or len(data) > MAX_REQUEST:
            raise ValueError(f"incomplete request: {data[:200]!r}")
        data += chunk
    request = json.loads(data)
    if not isinstance(request, dict) or not isinstance(request.get("argv"), list) or "log" not in request:
        raise ValueError(f"expected {{'argv': [...], 'log': path}}, got {data[:200]!r}")
    env = request.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"expected 'env' to map names to strings, got {env!r:.200}")
    return request


def _run_child(launcher: int, inherited: list[int], request: dict[str, Any]) -> None:
    """In the forked child of `launcher` (a pid): close its descriptors (`inherited`), become one driver instance."""
    code = 1
    try:
        _die_with_parent(launcher)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in inherited:
            os.close(fd)
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.update(request.get("env", {}))
        argv = request["argv"]
        assert isinstance(argv, list)  # checked by _read_request
        sys.argv = ["fake_dra", *(str(arg) for arg in argv)]
        code = driver_main(sys.argv[1:])
    except SystemExit as exit_:  # argparse's answer to bad options
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _answer(connection: socket.socket, message: dict[str, int]) -> None:
    with contextlib.suppress(OSError):
        connection.sendall(json.dumps(message).encode() + b"\n")


def serve(path: Path) -> None:
    """Accept requests on `path` until the owner dies (then the kernel kills the launcher)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd sees SIGCHLD
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    listener.bind(str(path))
    listener.listen(16)
    children: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener.fileno(), read_end], [], [])
        if read_end in readable:
            os.read(read_end, 4096)
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                connection = children.pop(pid, None)
                if connection is not None:
                    _answer(connection, {"exit": os.waitstatus_to_exitcode(status)})
                    connection.close()
        if listener.fileno() in readable:
            connection, _ = listener.accept()
            try:
                request = _read_request(connection)
            except (OSError, ValueError) as error:
                with contextlib.suppress(OSError):
                    connection.sendall(json.dumps({"error": str(error)}).encode() + b"\n")
                connection.close()
                continue
            launcher = os.getpid()
            pid = os.fork()
            if pid == 0:
                inherited = [listener.fileno(), connection.fileno(), read_end, write_end]
                _run_child(launcher, [*inherited, *(c.fileno() for c in children.values())], request)
            children[pid] = connection
            _answer(connection, {"pid": pid})


def main(argv: list[str] | None = None) -> int:
    """`python -m fake_dra.launcher --socket PATH`."""
    parser = argparse.ArgumentParser(prog="fake_dra.launcher", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, required=True, help="Unix socket to accept launch requests on")
    args = parser.parse_args(argv)
    load()  # the kubelet API's generated modules, imported now rather than in every child
    serve(args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
