"""Child-process helpers shared by the cluster supervisor and test-owned driver processes."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1


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
