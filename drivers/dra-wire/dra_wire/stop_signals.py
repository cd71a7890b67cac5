"""Waiting for SIGTERM or SIGINT in a process with threads, without ever missing one.

A Python signal handler runs only in the main thread, but the kernel hands a process-directed signal to any thread
that does not block it. When SIGTERM lands on a gRPC or HTTP worker thread while the main thread sleeps in
`threading.Event.wait()` (a lock acquire without a timeout), nothing wakes the main thread and the handler never
runs: the reference driver then ignored SIGTERM until it was killed 30 s later, now and then. Blocking the stop
signals before any thread starts keeps them pending for the process until the main thread takes one with sigwait.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def hold_stop_signals() -> None:
    """Block SIGTERM and SIGINT here and in every thread started afterwards: call before the first thread starts."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def wait_for_stop_signal() -> signal.Signals:
    """Sleep until SIGTERM or SIGINT arrives (or return one already pending); which one it was."""
    return signal.Signals(signal.sigwait(STOP_SIGNALS))
