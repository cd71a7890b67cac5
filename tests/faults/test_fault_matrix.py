"""The fault matrix: a default run on a private local cluster, faulted mid-run, ends in the verdict it deserves.

Each case starts `dra-conformance run` (reference driver, every bundled suite, `-n 2`) on a cluster of its own,
waits until the run has reported a share of its checks, injects one fault from outside, and reads the run's
summary.json. Slow (a full run per case, minutes each): `tox -e faults` runs it, not CI; the README says when.
The identity without DeviceClass rights is tests/cluster/test_preflight.py, the frozen metrics adapter
tests/metrics/test_adapter_faults.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dra_conformance import paths

# A cold-cache-free cluster start, a default run (~100 s on two cores) and its teardown, with room for a busy host.
RUN_DEADLINE = 900.0
# The share of the run's progress (pytest's "[ NN%]" lines) after which the fault is injected: mid-run.
FAULT_AT_PERCENT = 39
# How long the run may take to stop after a SIGTERM: its cluster's stop and the reports.
STOP_DEADLINE = 180.0
PROGRESS_POLL = 0.5

# Each case outlives the suites' per-test deadline (pyproject's `timeout`): a whole run, then its stop.
pytestmark = pytest.mark.timeout(RUN_DEADLINE + STOP_DEADLINE)


@dataclass
class RunUnderFault:
    """A `dra-conformance run` in progress, its output collected as it comes."""

    process: subprocess.Popen[str]
    state_dir: Path
    reports: Path
    output: list[str] = field(default_factory=list)

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def progress(self) -> int:
        """The highest "[ NN%]" pytest printed so far."""
        found = [
            int(part.split("%", 1)[0].strip("[ "))
            for line in self.output
            for part in line.split("[")[1:]
            if "%]" in part and part.split("%", 1)[0].strip().isdigit()
        ]
        return max(found, default=0)

    def wait_for_progress(self, percent: int) -> None:
        """Until the run reported `percent` of its checks (fails with the output when it ends first)."""
        deadline = time.monotonic() + RUN_DEADLINE
        while self.progress() < percent:
            assert self.process.poll() is None, f"the run ended before {percent}%: {''.join(self.output)[-3000:]}"
            assert time.monotonic() < deadline, f"no {percent}% within {RUN_DEADLINE}s: {''.join(self.output)[-2000:]}"
            threading.Event().wait(PROGRESS_POLL)

    def component_pid(self, name: str) -> int:
        """The pid the cluster's supervisor started `name` with."""
        state = json.loads((self.state_dir / "state.json").read_text())
        return int(state["processes"][name])

    def finish(self, timeout: float = RUN_DEADLINE) -> dict[str, Any]:
        """Wait for the run to end; its summary."""
        self.process.wait(timeout=timeout)
        summaries = list(self.reports.glob("*/summary.json"))
        assert len(summaries) == 1, f"one summary expected under {self.reports}: {summaries}\n{self.text()[-3000:]}"
        summary: dict[str, Any] = json.loads(summaries[0].read_text())
        return summary

    def text(self) -> str:
        """Everything the run printed."""
        return "".join(self.output)


@pytest.fixture
def faulted_run(tmp_path: Path) -> Iterator[Callable[..., RunUnderFault]]:
    """Starts a default run on a private cluster; stops it (and so its cluster) whatever the test did."""
    runs: list[RunUnderFault] = []

    def start(*extra: str) -> RunUnderFault:
        state_dir, reports = tmp_path / "cluster", tmp_path / "reports"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dra_conformance.cli",
                "run",
                "-n",
                "2",
                f"--dra-state-dir={state_dir}",
                f"--dra-reports-dir={reports}",
                "-p",
                "no:cacheprovider",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=paths.CHECKOUT,
        )
        run = RunUnderFault(process, state_dir, reports)
        threading.Thread(target=run._pump, daemon=True).start()
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.process.poll() is None:
            run.process.send_signal(signal.SIGTERM)
            try:
                run.process.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                run.process.kill()
                run.process.wait()


def test_a_run_stopped_by_sigterm_halfway_is_incomplete_with_its_counts(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    run.process.send_signal(signal.SIGTERM)
    summary = run.finish(STOP_DEADLINE)
    accounting = summary["accounting"]
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert str(summary["reasons"][0]).startswith("interrupted after"), summary["reasons"]
    assert 0 < accounting["never_run"] < accounting["collected"], accounting
    assert run.process.returncode != 0, "an interrupted run's exit code says so"


def test_the_api_server_killed_mid_run_is_a_cluster_fault_and_fails_no_capability(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    os.kill(run.component_pid("kube-apiserver"), signal.SIGKILL)
    summary = run.finish()
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert any(str(r).startswith("cluster fault: kube-apiserver") for r in summary["reasons"]), summary["reasons"]
    failed = {c: row for c, row in summary["capabilities"].items() if row["state"] == "failed"}
    assert not failed, f"a cluster fault failed driver capabilities: {failed}"


def test_the_driver_killed_from_outside_is_reported_and_never_certified(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    os.kill(run.component_pid("driver-kwok-node-0"), signal.SIGKILL)
    summary = run.finish()
    assert summary["verdict"] == "not certified", summary["reasons"]
    unexpected = summary["driver_exits"]["unexpected"]
    assert any(e["node"] == "kwok-node-0" and e["code"] == -signal.SIGKILL for e in unexpected), unexpected
    assert str(summary["reasons"][0]).startswith("run.driver-stays-up"), summary["reasons"]


def test_a_crashed_worker_makes_the_run_incomplete_not_a_driver_failure(
    faulted_run: Callable[..., RunUnderFault],
) -> None:
    run = faulted_run()
    run.wait_for_progress(FAULT_AT_PERCENT)
    # xdist's workers are execnet gateways (`python -c "import sys;exec(eval(sys.stdin.readline()))"`); the run's
    # other child is the local cluster's supervisor, whose death would be a cluster fault instead.
    workers = subprocess.run(
        ["pgrep", "-P", str(run.process.pid), "-f", "sys.stdin.readline"], capture_output=True, text=True, check=False
    ).stdout.split()
    assert workers, f"no xdist worker process under the run (pid {run.process.pid})"
    os.kill(int(workers[0]), signal.SIGKILL)
    summary = run.finish()
    # The crashed worker is not replaced (`--max-worker-restart=0`): the run ends early, its checks never ran.
    assert summary["verdict"] == "incomplete", summary["reasons"]
    assert any("worker crash" in str(r) for r in summary["reasons"]), summary["reasons"]
    failed = {c: row for c, row in summary["capabilities"].items() if row["state"] == "failed"}
    assert not failed, f"a crashed worker failed driver capabilities: {failed}"
