"""Child-process helpers shared by the cluster supervisor and test-owned driver processes."""

from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for Popen: the child gets SIGKILL when its parent dies, so nothing outlives a killed run."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
