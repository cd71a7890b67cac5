"""A process whose threads are busy still stops on SIGTERM: the stop signals wait for the main thread."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# A child that blocks the stop signals, keeps worker threads busy (the kernel may hand a process-directed signal to
# any of them), and reports which signal stopped it.
CHILD = """
import threading
from dra_wire.stop_signals import hold_stop_signals, wait_for_stop_signal

hold_stop_signals()
def spin():
    while True:
        sum(range(1000))
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
print("stopped by", wait_for_stop_signal().name, flush=True)
"""
# Starting an interpreter and four threads takes well under a second; a missed signal would never end the child.
STOP_DEADLINE = 20.0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_busy_process_stops_on_each_stop_signal(signum: signal.Signals) -> None:
    for attempt in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
            child.send_signal(signum)
            out, err = child.communicate(timeout=STOP_DEADLINE)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 0 and out.strip() == f"stopped by {signum.name}", (attempt, out, err)


def test_a_stop_signal_sent_before_the_wait_is_not_lost() -> None:
    code = (
        "import os, signal\n"
        "from dra_wire.stop_signals import hold_stop_signals, wait_for_stop_signal\n"
        "hold_stop_signals()\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "print(wait_for_stop_signal().name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=STOP_DEADLINE)
    assert done.returncode == 0 and done.stdout.strip() == "SIGTERM", (done.stdout, done.stderr)
