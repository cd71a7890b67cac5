"""A child started through the die-with-parent wrapper runs its command line and dies with its starter."""

from __future__ import annotations

import subprocess
import sys

from dra_conformance.kube import waits
from dra_conformance.processes import dying_with_this_process, process_state

# The kernel sends the parent-death signal as the starter exits; a loaded CI machine delivers it within seconds.
CHILD_GONE = 10.0
# A Python start, an import of this package and a `sleep` start.
STARTER_RUNS = 30.0


def test_the_wrapped_command_runs_with_its_arguments_and_exit_code() -> None:
    ran = subprocess.run(
        dying_with_this_process(["sh", "-c", 'echo "$0 $1"; exit 3', "a", "b"]), capture_output=True, text=True
    )
    assert (ran.returncode, ran.stdout) == (3, "a b\n"), ran


def test_the_wrapped_command_dies_with_the_process_that_started_it() -> None:
    # No preexec_fn (Python in the forked child of a process running grpcio's threads): a wrapper that executes it.
    starter = (
        "import subprocess; from dra_conformance.processes import dying_with_this_process; "
        "child = subprocess.Popen(dying_with_this_process(['sleep', '60'])); print(child.pid, flush=True)"
    )
    started = subprocess.run(
        [sys.executable, "-c", starter], capture_output=True, text=True, check=True, timeout=STARTER_RUNS
    )
    child = int(started.stdout)
    waits.until(
        lambda: process_state(child),
        lambda state: state in ("gone", "state Z (zombie)"),
        timeout=CHILD_GONE,
        what=f"the wrapped `sleep 60` (pid {child}) killed after its starter exited",
    )
