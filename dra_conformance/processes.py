"""Child-process helpers shared by the cluster supervisor and test-owned driver processes."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
# Run by a new Python before it executes the command line it is given: the command gets SIGKILL when the process
# whose pid is its first argument dies (PR_SET_PDEATHSIG survives the exec), or at once where that one died already.
# Popen's preexec_fn (`die_with`) does the same in the forked child, but runs Python there; in a parent with threads
# (grpcio's) that can abort the child (SIGABRT: "epoll" errors of gRPC's fork handlers).
DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    f"ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL); "
    "os.getppid() == int(sys.argv[1]) or os.kill(os.getpid(), signal.SIGKILL); "
    "os.execvp(sys.argv[2], sys.argv[2:])"
)


def die_with(parent: int) -> Callable[[], None]:
    """A Popen `preexec_fn`: the child gets SIGKILL when `parent` (the caller's pid) dies.

    The kernel sends the signal only for a death after the request, so a parent that died between fork and the
    request (a loaded machine widens that window) is checked for once the request is in place.
    """

    def request() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return request


def dying_with_this_process(argv: Sequence[str]) -> list[str]:
    """`argv` started through DIE_WITH_PARENT: it dies with this process, and nothing runs between fork and exec.

    For processes started from a parent with threads; a single-threaded one (the supervisor) may use `die_with`.
    """
    return [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), *argv]


def process_state(pid: int) -> str:
    """What the kernel says of `pid`, for an error message: its State line, or that it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    state = next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("State:")), "?")
    return f"state {state}"


def listening(path: Path) -> bool:
    """Whether a process accepts connections on the unix socket `path` (a killed driver leaves a dead file behind)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
